//! Single flight: concurrent compiles of one cache key become one compile.
//!
//! Sixteen requests with the same schema arriving together would otherwise compile it
//! sixteen times (each misses the cache, which is written only when a compile ends). The
//! first caller *leads*: it compiles; the others *join* and wait for its result. Every
//! caller keeps its own cancellation and deadline: a joined caller whose deadline passes
//! (or whose handle is raised) stops waiting at once, and the shared compile is
//! cancelled only when no caller waits for it any more, the leader included (the
//! compile's meter asks [`Flight::wanted`] at every check).

use super::{CompileControl, CompiledGrammar};
use crate::budget::{BudgetError, CancelHandle, Phase};
use crate::error::{Error, Result};
use rustc_hash::FxHashMap;
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How often a joined caller looks at its own cancellation handle while it waits (its
/// deadline wakes it exactly).
const POLL: Duration = Duration::from_millis(5);

/// One caller of a shared compile.
#[derive(Debug)]
struct Member {
    cancel: Option<CancelHandle>,
    deadline: Option<Instant>,
}

impl Member {
    /// Why this caller stopped waiting, if it did.
    fn gone(&self) -> Option<BudgetError> {
        if self.cancel.as_ref().is_some_and(CancelHandle::is_cancelled) {
            return Some(BudgetError::Cancelled { phase: Phase::Joined });
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Some(BudgetError::DeadlinePassed { phase: Phase::Joined });
        }
        None
    }
}

/// A compile under way and the callers waiting for it.
#[derive(Debug, Default)]
pub(crate) struct Flight {
    members: Mutex<Vec<Member>>,
    result: OnceLock<std::result::Result<Arc<CompiledGrammar>, Arc<Error>>>,
    /// Whether a caller joined the leader (its result must then be shared).
    joined: std::sync::atomic::AtomicBool,
    lock: Mutex<()>,
    ready: Condvar,
}

impl Flight {
    fn members(&self) -> std::sync::MutexGuard<'_, Vec<Member>> {
        // Every update is one push or retain: a panic cannot leave the list half-changed.
        self.members.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether some caller still waits for the compile (callers that stopped are dropped).
    pub fn wanted(&self) -> bool {
        let mut m = self.members();
        m.retain(|x| x.gone().is_none());
        !m.is_empty()
    }

    /// The leader's own verdict once its compile returned `r`: the result, unless the
    /// leader itself stopped waiting meanwhile (the compile went on for the others).
    fn leader_answer(
        r: Result<Arc<CompiledGrammar>>,
        control: &CompileControl,
    ) -> Result<Arc<CompiledGrammar>> {
        let me = Member { cancel: control.cancel.clone(), deadline: control.deadline };
        let Some(mine) = me.gone() else { return r };
        // Where the work stopped, if it stopped for want of callers: the leader's own stop
        // (its cancellation or its deadline) is named there.
        let at = match &r {
            Ok(_) => Some(Phase::Joined),
            Err(e) => match e.root() {
                Error::Budget(b) if !b.is_deterministic() => b.phase(),
                _ => None,
            },
        };
        match (at, mine) {
            (None, _) => r,
            (Some(phase), BudgetError::Cancelled { .. }) => {
                Err(Error::Budget(BudgetError::Cancelled { phase }))
            }
            (Some(phase), _) => Err(Error::Budget(BudgetError::DeadlinePassed { phase })),
        }
    }

    /// Waits for the leader's result, or until this caller's own cancellation or deadline.
    fn wait(&self, control: &CompileControl) -> Result<Arc<CompiledGrammar>> {
        let me = Member { cancel: control.cancel.clone(), deadline: control.deadline };
        let mut guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            if let Some(r) = self.result.get() {
                return r.clone().map_err(Error::Shared);
            }
            if let Some(e) = me.gone() {
                // (Dropped from the members at the meter's next look.)
                return Err(Error::Budget(e));
            }
            let mut wait = POLL;
            if let Some(d) = me.deadline {
                wait = wait.min(d.saturating_duration_since(Instant::now()));
            }
            guard = self.ready.wait_timeout(guard, wait).map_or_else(|p| p.into_inner().0, |r| r.0);
        }
    }

    /// Hands `r` to the callers waiting and returns the leader's copy: an error is
    /// shared ([`Error::Shared`], displayed as is) only when someone joined. (Called once
    /// the flight left the map: no caller joins after.)
    fn land(&self, r: Result<Arc<CompiledGrammar>>) -> Result<Arc<CompiledGrammar>> {
        let joined = self.joined.load(std::sync::atomic::Ordering::Acquire);
        let (shared, mine) = match r {
            Ok(c) => (Ok(c.clone()), Ok(c)),
            // No one waits for it.
            Err(e) if !joined => return Err(e),
            Err(e) => {
                let e = Arc::new(e);
                (Err(e.clone()), Err(Error::Shared(e)))
            }
        };
        let _ = self.result.set(shared);
        let _guard = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        self.ready.notify_all();
        mine
    }
}

/// The compiles under way, by cache key.
#[derive(Debug, Default)]
pub(crate) struct Flights {
    map: Mutex<FxHashMap<String, Arc<Flight>>>,
}

impl Flights {
    /// Runs `compile` for `key` once for every caller that asks while it runs: the first
    /// caller runs it (with the flight, whose [`Flight::wanted`] its meter asks); the
    /// others wait for its result within their own `control`.
    pub fn run(
        &self,
        key: &str,
        control: &CompileControl,
        compile: impl FnOnce(&Arc<Flight>) -> Result<Arc<CompiledGrammar>>,
    ) -> Result<Arc<CompiledGrammar>> {
        let member = Member { cancel: control.cancel.clone(), deadline: control.deadline };
        let flight = {
            let mut map = self.map.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(f) = map.get(key) {
                // (Under the map's lock: the leader lands after taking the flight out of
                // the map, so a joined caller is always answered.)
                f.joined.store(true, std::sync::atomic::Ordering::Release);
                f.members().push(member);
                let f = f.clone();
                drop(map);
                return f.wait(control);
            }
            let f = Arc::new(Flight::default());
            f.members().push(member);
            map.insert(key.to_string(), f.clone());
            f
        };
        // Taken out of the map even if the compile panics, so that no caller waits on a
        // flight that will never land.
        struct Leave<'a>(&'a Flights, &'a str, &'a Arc<Flight>);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                let mut map = self.0.map.lock().unwrap_or_else(|p| p.into_inner());
                if map.get(self.1).is_some_and(|f| Arc::ptr_eq(f, self.2)) {
                    map.remove(self.1);
                }
                drop(map);
                if std::thread::panicking() {
                    // (The compile panicked: the joined callers hear of a stop, not a hang.)
                    let _ = self.2.land(Err(Error::Budget(BudgetError::Cancelled { phase: Phase::Joined })));
                }
            }
        }
        let leave = Leave(self, key, &flight);
        let r = compile(&flight);
        // Out of the map before landing: a caller that finds no flight finds the cache
        // written (the leader's compile wrote it).
        drop(leave);
        Flight::leader_answer(flight.land(r), control)
    }
}
