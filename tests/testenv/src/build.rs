//! Workspace binaries for the scale harnesses: `cargo build` of one binary, in the profile of
//! the running harness (or release), so that a harness measures what it was built as.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;

/// Which profile's binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// The profile of the running executable (`target/<profile>/examples/<harness>`).
    OfThisExecutable,
    /// `target/release`, whatever the harness was built as.
    Release,
}

/// `target/<profile>/<bin>` of workspace package `package`, built first with cargo when
/// `build` (cargo skips the work when it is fresh). Warns when the binary is not a release one:
/// its figures mean little.
pub fn workspace_binary(
    package: &str,
    bin: &str,
    profile: Profile,
    build: bool,
) -> Result<PathBuf, Error> {
    let exe = std::env::current_exe().map_err(Error::io("find this executable"))?;
    // target/<profile>/examples/<name>: two levels up is the profile's directory.
    let own = exe
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| Error::Invalid(format!("unexpected executable path {}", exe.display())))?;
    let dir = match profile {
        Profile::OfThisExecutable => own.to_path_buf(),
        Profile::Release => own
            .parent()
            .map(|target| target.join("release"))
            .ok_or_else(|| {
                Error::Invalid(format!("no target directory above {}", own.display()))
            })?,
    };
    let name = dir
        .file_name()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    if name != "release" {
        eprintln!(
            "warning: the harness runs from the {name:?} profile, so it measures a {name:?} {bin}; use --release for meaningful figures"
        );
    }
    if build {
        let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", package, "--bin", bin]);
        match name.as_str() {
            "debug" => {}
            "release" => {
                cmd.arg("--release");
            }
            other => {
                cmd.args(["--profile", other]);
            }
        }
        cmd.current_dir(env!("CARGO_MANIFEST_DIR"));
        eprintln!("building {bin}: {cmd:?}");
        let status = cmd
            .status()
            .map_err(Error::io("run cargo (pass --no-build to skip)"))?;
        if !status.success() {
            return Err(Error::Invalid(format!(
                "cargo build of {package} failed ({status})"
            )));
        }
    }
    let path = dir.join(bin);
    if !path.is_file() {
        return Err(Error::Invalid(format!(
            "{} is missing: build it first (`cargo build --release -p {package} --bin {bin}`), or drop --no-build",
            path.display()
        )));
    }
    Ok(path)
}
