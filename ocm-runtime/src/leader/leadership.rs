//! [`Leadership`]: whether this replica leads, as its elector last said and the clock says.

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;
use tokio::time::Instant;

use super::write_gate::WriteGateLayer;

/// What an elector publishes to its [`Leadership`]s.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct State {
    /// When the last successful acquire or renew was *sent*, while this replica holds the Lease.
    pub(super) renewed: Option<Instant>,
    /// Another holder (or nobody: released, deleted) was seen in the Lease after this replica
    /// led: someone else may have written meanwhile, so this replica must not lead again.
    pub(super) deposed: bool,
}

impl State {
    /// Until when this replica may believe it leads.
    pub(super) fn leading_until(&self, renew_deadline: Duration) -> Option<Instant> {
        self.renewed.map(|r| r + renew_deadline)
    }
}

/// Whether this replica leads. Clones are cheap and all see the same elector.
#[derive(Clone, Debug)]
pub struct Leadership {
    pub(super) mode: Mode,
}

#[derive(Clone, Debug)]
pub(super) enum Mode {
    Always,
    Elected {
        rx: watch::Receiver<State>,
        renew_deadline: Duration,
    },
}

impl Leadership {
    /// Leads, always: for a single replica (`--leader-elect=false`) and for tests.
    pub fn always() -> Self {
        Self { mode: Mode::Always }
    }

    /// True while the last successful renew started less than the renew deadline ago. Turns
    /// false on its own when renewing stops, whatever became of the election task.
    pub fn is_leader(&self) -> bool {
        match &self.mode {
            Mode::Always => true,
            Mode::Elected { rx, renew_deadline } => rx
                .borrow()
                .leading_until(*renew_deadline)
                .is_some_and(|until| Instant::now() < until),
        }
    }

    /// Resolves once this replica leads (at once if it does). Never resolves after the elector
    /// has stopped without leading.
    pub async fn wait_leader(&mut self) {
        loop {
            if self.is_leader() {
                return;
            }
            let Mode::Elected { rx, .. } = &mut self.mode else {
                return;
            };
            if rx.changed().await.is_err() {
                // The elector is gone: nobody will renew any more.
                std::future::pending::<()>().await;
            }
        }
    }

    /// Resolves once this replica does not lead (at once if it does not): when it loses the
    /// Lease, when it releases it, or when the renew deadline passes without a renew, also if
    /// the election task is stuck or gone. Never resolves with [`Leadership::always`].
    ///
    /// Every poll first checks the deadline on the clock itself, so that in a `biased` select
    /// it wins over work polled after it even when the timer has not fired yet (a process
    /// resumed after being stopped past its deadline runs its tasks before its timers).
    pub async fn lost(&mut self) {
        let now = self.clone();
        let ended = self.ended();
        let mut ended = std::pin::pin!(ended);
        std::future::poll_fn(|cx| {
            if now.is_leader() {
                ended.as_mut().poll(cx)
            } else {
                std::task::Poll::Ready(())
            }
        })
        .await
    }

    /// Resolves once [`Self::is_leader`] may no longer be `leading` (at once if it is not):
    /// [`Self::lost`] for `true`, [`Self::wait_leader`] for `false`. For a loop that acts on
    /// every change of leadership without polling it:
    ///
    /// ```no_run
    /// # async fn f(leadership: ocm_runtime::Leadership) {
    /// loop {
    ///     let leading = leadership.is_leader();
    ///     // ... start or stop what only the leader does ...
    ///     leadership.changes_from(leading).await;
    /// }
    /// # }
    /// ```
    ///
    /// With [`Leadership::always`] it never resolves for `true` and resolves at once for
    /// `false`. The future owns a clone, so it borrows nothing and can be spawned.
    pub fn changes_from(&self, leading: bool) -> impl Future<Output = ()> + Send + 'static {
        let mut l = self.clone();
        async move {
            if leading {
                l.lost().await;
            } else {
                l.wait_leader().await;
            }
        }
    }

    /// [`Self::lost`] as the elector's news and the timer tell it.
    async fn ended(&mut self) {
        let Mode::Elected { rx, renew_deadline } = &mut self.mode else {
            return std::future::pending().await;
        };
        loop {
            let Some(until) = rx.borrow_and_update().leading_until(*renew_deadline) else {
                return;
            };
            if Instant::now() >= until {
                return;
            }
            tokio::select! {
                changed = rx.changed() => if changed.is_err() {
                    tokio::time::sleep_until(until).await;
                    return;
                },
                _ = tokio::time::sleep_until(until) => return,
            }
        }
    }
}

impl Leadership {
    /// Resolves once this replica has led and another holder has been seen in the Lease since,
    /// or once the elector is gone: what a binary waits on to exit. Never resolves with
    /// [`Leadership::always`].
    ///
    /// A leader that only missed its renew deadline (the apiserver down or unreachable) is not
    /// deposed: it stops writing ([`Self::is_leader`] turns false) and keeps its stores, and
    /// leads again when it renews the Lease unchanged. That is safe because a renew is
    /// preconditioned on the `resourceVersion` read with our identity as holder, and any other
    /// replica must write its own identity into the Lease to lead; exiting instead would only
    /// throw the stores away and hand the Lease to a fresh process a lease duration later.
    pub async fn deposed(&mut self) {
        let Mode::Elected { rx, .. } = &mut self.mode else {
            return std::future::pending().await;
        };
        loop {
            if rx.borrow_and_update().deposed {
                return;
            }
            if rx.changed().await.is_err() {
                // The elector is gone: nobody will renew any more.
                return;
            }
        }
    }

    /// A tower layer for a hub client that refuses every request that could change something
    /// (any method but `GET`, `HEAD` and `OPTIONS`) while this replica does not lead. The check
    /// runs as the request is handed to the connection, after any wait in a rate limiter
    /// layered outside it (its wait is in `poll_ready`), so a write planned while leading and
    /// held up until after the lease ran out is not sent. Each retry is a new request and is
    /// checked again. A refused request fails with [`NotLeader`](super::NotLeader) (see [`is_not_leader`](super::is_not_leader)).
    ///
    /// The elector's own client must not carry it (it could never take the Lease), nor a client
    /// whose `POST`s write nothing a standby may not send (TokenReviews, SubjectAccessReviews).
    pub fn write_gate(&self) -> WriteGateLayer {
        WriteGateLayer {
            leadership: self.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn leadership_ends_at_the_renew_deadline_without_the_elector() {
        let (tx, rx) = watch::channel(State {
            renewed: None,
            deposed: false,
        });
        let mut l = Leadership {
            mode: Mode::Elected {
                rx,
                renew_deadline: Duration::from_secs(10),
            },
        };
        assert!(!l.is_leader());
        let start = Instant::now();
        tx.send_replace(State {
            renewed: Some(start),
            deposed: false,
        });
        l.wait_leader().await;
        assert!(l.is_leader());
        // The elector vanishes without a word (its task aborted): leadership still ends on time.
        drop(tx);
        l.lost().await;
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        assert!(!l.is_leader());
    }

    #[tokio::test(start_paused = true)]
    async fn lost_follows_renewals_and_step_down() {
        let start = Instant::now();
        let (tx, rx) = watch::channel(State {
            renewed: Some(start),
            deposed: false,
        });
        let mut l = Leadership {
            mode: Mode::Elected {
                rx,
                renew_deadline: Duration::from_secs(10),
            },
        };
        let renewer = tokio::spawn(async move {
            for _ in 0..3 {
                tokio::time::sleep(Duration::from_secs(2)).await;
                tx.send_replace(State {
                    renewed: Some(Instant::now()),
                    deposed: false,
                });
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
            tx.send_replace(State {
                renewed: None,
                deposed: false,
            });
            tx
        });
        l.lost().await;
        // Three renewals two seconds apart, then a step-down one second later.
        assert_eq!(start.elapsed(), Duration::from_secs(7));
        drop(renewer.await.unwrap());
    }

    /// Missing the renew deadline (the apiserver down) ends leadership but does not depose:
    /// only another holder seen in the Lease, or the elector gone, does.
    #[tokio::test(start_paused = true)]
    async fn deposed_only_by_another_holder_or_a_gone_elector() {
        let (tx, rx) = watch::channel(State {
            renewed: Some(Instant::now()),
            deposed: false,
        });
        let mut l = Leadership {
            mode: Mode::Elected {
                rx,
                renew_deadline: Duration::from_secs(10),
            },
        };
        l.lost().await;
        assert!(!l.is_leader());
        let mut waiting = l.clone();
        let early = tokio::time::timeout(Duration::from_secs(60), waiting.deposed()).await;
        assert!(early.is_err(), "deposed by a missed renew deadline");
        tx.send_replace(State {
            renewed: Some(Instant::now()),
            deposed: false,
        });
        assert!(l.is_leader(), "leads again after renewing the same Lease");
        tx.send_replace(State {
            renewed: None,
            deposed: true,
        });
        l.deposed().await;
        let mut gone = l.clone();
        drop(tx);
        gone.deposed().await;
    }

    /// A process stopped (SIGSTOP) past its renew deadline runs its tasks before its timer
    /// driver notices: `lost()` must see the deadline on the clock, not wait for the timer.
    #[tokio::test]
    async fn lost_sees_the_deadline_before_the_timer_fires() {
        let (_tx, rx) = watch::channel(State {
            renewed: Some(Instant::now()),
            deposed: false,
        });
        let mut l = Leadership {
            mode: Mode::Elected {
                rx,
                renew_deadline: Duration::from_millis(50),
            },
        };
        let mut lost = std::pin::pin!(l.lost());
        assert!(futures::poll!(lost.as_mut()).is_pending());
        // Blocks the runtime's only thread, as a stopped process is: no timer is processed.
        std::thread::sleep(Duration::from_millis(100));
        assert!(futures::poll!(lost.as_mut()).is_ready());
    }

    #[tokio::test(start_paused = true)]
    async fn always_leads() {
        let mut l = Leadership::always();
        assert!(l.is_leader());
        l.wait_leader().await;
        let lost = tokio::time::timeout(Duration::from_secs(3600), l.lost()).await;
        assert!(lost.is_err());
        // What the controllers' "always the leader" stand-ins did: never a change from
        // leading, at once from not leading.
        let change = tokio::time::timeout(Duration::from_secs(3600), l.changes_from(true)).await;
        assert!(change.is_err());
        l.changes_from(false).await;
    }

    #[tokio::test(start_paused = true)]
    async fn changes_from_follows_the_elector() {
        let (tx, rx) = watch::channel(State {
            renewed: None,
            deposed: false,
        });
        let l = Leadership {
            mode: Mode::Elected {
                rx,
                renew_deadline: Duration::from_secs(10),
            },
        };
        // Not leading: a change from leading is there at once.
        l.changes_from(true).await;
        let became = tokio::spawn(l.changes_from(false));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert!(!became.is_finished());
        let start = Instant::now();
        tx.send_replace(State {
            renewed: Some(start),
            deposed: false,
        });
        became.await.unwrap();
        assert!(l.is_leader());
        // Leading and no renew: the change comes at the renew deadline.
        l.changes_from(true).await;
        assert_eq!(start.elapsed(), Duration::from_secs(10));
        assert!(!l.is_leader());
        drop(tx);
    }
}
