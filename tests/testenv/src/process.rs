//! Child processes that cannot outlive the test process.
//!
//! Three layers, because a test binary can end in three ways:
//! - a `ControlPlane` that is dropped (also while a panicking test unwinds) kills its children;
//! - one kept in a `static` is never dropped, so an `atexit` hook kills what is still registered
//!   when the harness exits (a panicking test does not abort the process);
//! - a process killed outright runs no hook, so every child gets `PR_SET_PDEATHSIG(SIGKILL)`.
//!   The kernel ties that signal to the *thread* that forked the child, and libtest ends each
//!   test's thread when the test ends, so all children are forked from one thread that lives as
//!   long as the process.

use std::fs::File;
use std::io;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex, OnceLock, Weak};

type SpawnReply = mpsc::Sender<io::Result<Child>>;

fn spawner() -> &'static Mutex<mpsc::Sender<(Command, SpawnReply)>> {
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<(Command, SpawnReply)>>> = OnceLock::new();
    SPAWNER.get_or_init(|| {
        let (tx, rx) = mpsc::channel::<(Command, SpawnReply)>();
        std::thread::Builder::new()
            .name("testenv-spawner".into())
            .spawn(move || {
                // Lives until the process exits: the senders sit in a static.
                for (mut cmd, reply) in rx {
                    let _ = reply.send(cmd.spawn());
                }
            })
            .expect("testenv: cannot start the spawner thread");
        Mutex::new(tx)
    })
}

/// A child process, killed and reaped on drop. Its output goes to `log`.
pub(crate) struct ManagedChild {
    name: &'static str,
    child: Mutex<Option<Child>>,
    pid: u32,
}

impl ManagedChild {
    /// Appends to `log`, so that a restarted process keeps the earlier run's lines.
    pub(crate) fn spawn(name: &'static str, mut cmd: Command, log: &Path) -> io::Result<Self> {
        let out = File::options().create(true).append(true).open(log)?;
        let err = out.try_clone()?;
        cmd.stdin(Stdio::null()).stdout(out).stderr(err);
        Self::spawn_as_set_up(name, cmd)
    }

    /// [`ManagedChild::spawn`] with `cmd`'s stdio left as the caller set it up.
    pub(crate) fn spawn_as_set_up(name: &'static str, mut cmd: Command) -> io::Result<Self> {
        set_parent_death_signal(&mut cmd);
        let (reply_tx, reply_rx) = mpsc::channel();
        spawner()
            .lock()
            .map_err(|_| io::Error::other("spawner lock poisoned"))?
            .send((cmd, reply_tx))
            .map_err(|_| io::Error::other("spawner thread is gone"))?;
        let child = reply_rx
            .recv()
            .map_err(|_| io::Error::other("spawner thread is gone"))??;
        let pid = child.id();
        Ok(Self {
            name,
            child: Mutex::new(Some(child)),
            pid,
        })
    }

    pub(crate) fn pid(&self) -> u32 {
        self.pid
    }

    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// `Some(description)` once the process has exited.
    pub(crate) fn exited(&self) -> Option<String> {
        let mut guard = self.child.lock().ok()?;
        let child = guard.as_mut()?;
        match child.try_wait() {
            Ok(Some(status)) => Some(status.to_string()),
            Ok(None) => None,
            Err(e) => Some(format!("unknown ({e})")),
        }
    }

    /// Whether the process is still running (not killed, not exited).
    pub(crate) fn running(&self) -> bool {
        let Ok(mut guard) = self.child.lock() else {
            return false;
        };
        guard
            .as_mut()
            .is_some_and(|child| matches!(child.try_wait(), Ok(None)))
    }

    /// Kills and reaps the process; idempotent.
    pub(crate) fn kill(&self) {
        let taken = match self.child.lock() {
            Ok(mut guard) => guard.take(),
            Err(poisoned) => poisoned.into_inner().take(),
        };
        if let Some(mut child) = taken {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for ManagedChild {
    fn drop(&mut self) {
        self.kill();
    }
}

#[allow(unsafe_code)]
fn set_parent_death_signal(cmd: &mut Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs in the forked child before exec and only calls prctl(2) and
    // getppid(2), both async-signal-safe; it touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec(|| {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(io::Error::last_os_error());
            }
            // The spawner thread cannot die before this point, but be exact about the race
            // the man page describes: if the parent already went away, do not start.
            if libc::getppid() == 1 {
                return Err(io::Error::other("parent exited before exec"));
            }
            Ok(())
        });
    }
}

/// Something to shut down when the process exits.
pub(crate) trait Shutdown: Send + Sync {
    fn shutdown(&self);
}

fn registry() -> &'static Mutex<Vec<Weak<dyn Shutdown>>> {
    static REGISTRY: OnceLock<Mutex<Vec<Weak<dyn Shutdown>>>> = OnceLock::new();
    REGISTRY.get_or_init(|| {
        register_atexit();
        Mutex::new(Vec::new())
    })
}

/// Shuts `item` down at process exit if it is still alive then.
pub(crate) fn register_for_exit(item: &Arc<dyn Shutdown>) {
    if let Ok(mut list) = registry().lock() {
        list.retain(|w| w.strong_count() > 0);
        list.push(Arc::downgrade(item));
    }
}

extern "C" fn shutdown_registered() {
    let items: Vec<Arc<dyn Shutdown>> = match registry().lock() {
        Ok(list) => list.iter().filter_map(Weak::upgrade).collect(),
        Err(poisoned) => poisoned
            .into_inner()
            .iter()
            .filter_map(Weak::upgrade)
            .collect(),
    };
    for item in items {
        item.shutdown();
    }
}

#[allow(unsafe_code)]
fn register_atexit() {
    // SAFETY: atexit(3) takes a plain extern "C" function with no arguments; the handler only
    // locks a Mutex and kills children, which is sound during normal process exit.
    unsafe {
        libc::atexit(shutdown_registered);
    }
}

/// Whether a process with this pid is running (a zombie counts as gone).
pub fn is_running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the first field after the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state != "Z" && state != "X"),
        Err(_) => false,
    }
}

/// [`crate::Error::ProcessExited`] for `process`, with the last 20 lines of its log.
pub(crate) fn exited(process: &'static str, status: String, log: &Path) -> crate::Error {
    crate::Error::ProcessExited {
        process,
        status,
        log: log.to_path_buf(),
        tail: tail(log, 20),
    }
}

/// The last `n` lines of the file at `path` (empty when it cannot be read).
pub fn tail(path: &Path, n: usize) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A binary a harness starts (a controller, an agent, a manager): dies with the harness (see
/// the module's notes), killed and reaped on drop, its output in a log file or on the harness's
/// stderr.
pub struct ChildProcess {
    child: ManagedChild,
    log: Option<std::path::PathBuf>,
}

impl ChildProcess {
    /// Starts `cmd` with stdin closed and stdout and stderr written to `log` (created anew).
    /// `what` names it in errors ("the controller").
    pub fn start(what: &'static str, cmd: Command, log: &Path) -> Result<Self, crate::Error> {
        File::create(log).map_err(crate::Error::io(format!("create {}", log.display())))?;
        let child = ManagedChild::spawn(what, cmd, log)
            .map_err(crate::Error::io(format!("start {what}")))?;
        Ok(Self {
            child,
            log: Some(log.to_path_buf()),
        })
    }

    /// Starts `cmd` with its stdio as `cmd` says (e.g. stderr shared with the harness).
    pub fn start_unlogged(what: &'static str, cmd: Command) -> Result<Self, crate::Error> {
        let child = ManagedChild::spawn_as_set_up(what, cmd)
            .map_err(crate::Error::io(format!("start {what}")))?;
        Ok(Self { child, log: None })
    }

    pub fn pid(&self) -> u32 {
        self.child.pid()
    }

    /// Its log file, when it has one.
    pub fn log(&self) -> Option<&Path> {
        self.log.as_deref()
    }

    /// An error when it has exited, with the end of its log.
    pub fn check_alive(&self) -> Result<(), crate::Error> {
        match (self.child.exited(), &self.log) {
            (None, _) => Ok(()),
            (Some(status), Some(log)) => Err(exited(self.child.name(), status, log)),
            (Some(status), None) => Err(crate::Error::Invalid(format!(
                "{} exited ({status})",
                self.child.name()
            ))),
        }
    }
}
