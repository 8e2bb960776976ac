//! A compile's work budget: a deterministic count of work units that every compile phase
//! charges, a cancellation flag another thread can raise, and an optional deadline.
//!
//! Limits on sizes (states, rules) bound memory but not time: a 300-byte schema whose
//! `oneOf` patterns each become an intersection with the others' complements stays under
//! every size limit and still took seconds. The budget bounds the work itself. Its unit is
//! one step of an inner loop (an automaton state built, a transition examined, a trie node
//! a mask walk visits), so a verdict depends on the input alone, never on the machine's
//! load: the same compile under the same budget is refused on every machine or on none.
//!
//! A compile installs its [`Meter`] on its thread ([`scope`]); the crew's helpers install
//! the same meter while they work for it, and the staged finishing job takes what is left
//! of its limit to its own thread ([`Meter::detached`]). Code deep in a phase calls [`charge`], which is free when no meter is installed
//! (a compile without a budget, a unit test) and otherwise adds to one shared counter.
//! Cancellation and the deadline are looked at every [`CHECK_EVERY`] units, so a stop
//! comes within a few milliseconds of being asked for.

use std::cell::RefCell;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// The phases a budget names in its error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Phase {
    /// Converting a spec (JSON Schema, regex, Lark, structural tag, EBNF) to grammar IR.
    Conversion,
    /// Intersections and complements of automata (patterns under lengths, `not`, `oneOf`).
    Intersection,
    /// Building the rules' NFAs.
    Nfa,
    /// The subset construction of the rules' DFAs.
    Dfa,
    /// Minimizing the DFAs.
    Minimization,
    /// Token masks computed by the compile (start states, the eager budget).
    Masks,
    /// The finishing job of a staged compile (its own conversions, automata and masks).
    Finishing,
    /// A matcher's fill: the masks it computes lazily and the tokens it runs through the
    /// parse ([`GrammarMatcher::set_fill_work_limit`](crate::GrammarMatcher::set_fill_work_limit)).
    Fill,
    /// Waiting for the same compile, made for another caller (single flight).
    Joined,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Conversion => "conversion",
            Phase::Intersection => "intersection",
            Phase::Nfa => "NFA construction",
            Phase::Dfa => "DFA construction",
            Phase::Minimization => "minimization",
            Phase::Masks => "token masks",
            Phase::Finishing => "staged finishing",
            Phase::Fill => "a mask fill",
            Phase::Joined => "the same compile for another caller",
        })
    }
}

/// Why a budgeted compile stopped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetError {
    /// The work passed the budget. Deterministic: the same input under the same limit
    /// is refused again.
    #[error("the work budget ran out in {phase}: {spent} work units spent, limit {limit}")]
    Exceeded {
        /// Where the work passed the limit.
        phase: Phase,
        /// Units spent when it was noticed.
        spent: u64,
        /// The limit.
        limit: u64,
    },
    /// The caller cancelled the compile ([`CancelHandle::cancel`]).
    #[error("the compile was cancelled during {phase}")]
    Cancelled {
        /// The phase it was in.
        phase: Phase,
    },
    /// The compile's deadline passed.
    #[error("the compile ran past its deadline during {phase}")]
    DeadlinePassed {
        /// The phase it was in.
        phase: Phase,
    },
    /// The grammar's lazily computed masks reached their memory cap
    /// ([`CompileOptions::mask_memory_limit`](crate::CompileOptions::mask_memory_limit)):
    /// a fill that needs one more mask is refused. The masks already computed stay.
    #[error("the grammar's token masks hold {bytes} bytes, at their limit of {limit}: no more are computed")]
    MaskMemory {
        /// Bytes held by the grammar's masks.
        bytes: usize,
        /// The cap.
        limit: usize,
    },
}

impl BudgetError {
    /// Whether the refusal belongs to the input (the work budget) rather than to this
    /// attempt (a cancellation or a deadline): only such a verdict may be remembered.
    pub fn is_deterministic(&self) -> bool {
        matches!(self, BudgetError::Exceeded { .. })
    }

    /// Where the work stopped (`None` for the mask memory cap, which is no phase's).
    pub fn phase(&self) -> Option<Phase> {
        match self {
            BudgetError::Exceeded { phase, .. }
            | BudgetError::Cancelled { phase }
            | BudgetError::DeadlinePassed { phase } => Some(*phase),
            BudgetError::MaskMemory { .. } => None,
        }
    }
}

/// Raises a compile's cancellation flag from any thread. Clones share the flag.
///
/// ```
/// use grammask::budget::CancelHandle;
/// let h = CancelHandle::new();
/// let other = h.clone();
/// std::thread::spawn(move || other.cancel()).join().unwrap();
/// assert!(h.is_cancelled());
/// ```
#[derive(Debug, Clone, Default)]
pub struct CancelHandle(Arc<AtomicBool>);

impl CancelHandle {
    /// A handle whose flag is down.
    pub fn new() -> Self {
        Self::default()
    }

    /// Asks every compile that holds this handle to stop at its next check.
    pub fn cancel(&self) {
        self.0.store(true, Ordering::Release);
    }

    /// Whether [`Self::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// How often (in units) a meter looks at the clock and the cancellation flag: a few
/// hundred microseconds of work at most, so a stop is prompt and a check costs nothing
/// measurable.
pub const CHECK_EVERY: u64 = 1 << 14;

/// One compile's count of work, shared by every thread that works for it.
pub struct Meter {
    spent: AtomicU64,
    /// The next count at which cancellation and the deadline are looked at.
    next_check: AtomicU64,
    limit: Option<u64>,
    cancel: Option<CancelHandle>,
    deadline: Option<Instant>,
    /// The first stop, kept so that every later charge (other threads, later phases)
    /// reports the same error.
    stopped: std::sync::OnceLock<BudgetError>,
    /// A fill's meter: mask walks charge it node by node ([`charge_walk`]). A compile's
    /// does not count walks (it charges each start mask a vocabulary's worth up front:
    /// the nodes a walk visits depend on which masks other threads computed first).
    walks: bool,
    /// Asked at every check whether anyone still wants the work (a compile shared by
    /// several callers: cancelled only when the last one is gone).
    wanted: Option<Arc<dyn Fn() -> bool + Send + Sync>>,
}

impl fmt::Debug for Meter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Meter")
            .field("spent", &self.spent())
            .field("limit", &self.limit)
            .field("stopped", &self.stopped.get())
            .finish_non_exhaustive()
    }
}

impl Meter {
    /// A meter with a work limit (`None`: count only), a cancellation handle and a deadline.
    pub fn new(limit: Option<u64>, cancel: Option<CancelHandle>, deadline: Option<Instant>) -> Arc<Meter> {
        Arc::new(Meter {
            spent: AtomicU64::new(0),
            next_check: AtomicU64::new(CHECK_EVERY),
            limit,
            cancel,
            deadline,
            stopped: std::sync::OnceLock::new(),
            walks: false,
            wanted: None,
        })
    }

    /// A meter with a work limit that stops, as cancelled, once `wanted` says no one
    /// waits for the work any more (looked at every [`CHECK_EVERY`] units).
    pub(crate) fn shared(limit: Option<u64>, wanted: Arc<dyn Fn() -> bool + Send + Sync>) -> Arc<Meter> {
        let mut m = Meter::new(limit, None, None);
        if let Some(m) = Arc::get_mut(&mut m) {
            m.wanted = Some(wanted);
        }
        m
    }

    /// A matcher fill's meter: `limit` units, counting the trie nodes its mask walks
    /// visit ([`charge_walk`]) and the bytes it runs through the parse.
    pub fn for_fill(limit: u64) -> Arc<Meter> {
        let mut m = Meter::new(Some(limit), None, None);
        if let Some(m) = Arc::get_mut(&mut m) {
            m.walks = true;
        }
        m
    }

    /// Units charged so far.
    pub fn spent(&self) -> u64 {
        self.spent.load(Ordering::Relaxed)
    }

    /// A meter for work that outlives its caller's wait (a staged compile's finishing job):
    /// what is left of this one's limit, and neither its cancellation nor its deadline,
    /// which belong to the call that has returned. (Its verdict is then the input's alone,
    /// so a grammar that carries it may be cached.)
    pub fn detached(&self) -> Arc<Meter> {
        Meter::new(self.limit.map(|l| l.saturating_sub(self.spent())), None, None)
    }

    /// The error that stopped the work, if it was stopped.
    pub fn stopped(&self) -> Option<BudgetError> {
        self.stopped.get().cloned()
    }

    /// Adds `units` of `phase`'s work; the error once the limit is passed, the compile
    /// cancelled or its deadline gone.
    pub fn charge(&self, phase: Phase, units: u64) -> Result<(), BudgetError> {
        if let Some(e) = self.stopped.get() {
            return Err(e.clone());
        }
        let spent = self.spent.fetch_add(units, Ordering::Relaxed).saturating_add(units);
        if let Some(limit) = self.limit {
            if spent > limit {
                return Err(self.stop(BudgetError::Exceeded { phase, spent, limit }));
            }
        }
        if spent >= self.next_check.load(Ordering::Relaxed) {
            self.next_check.store(spent.saturating_add(CHECK_EVERY), Ordering::Relaxed);
            self.check(phase)?;
        }
        Ok(())
    }

    /// Looks at cancellation and the deadline now (a phase boundary, a long step).
    pub fn check(&self, phase: Phase) -> Result<(), BudgetError> {
        if let Some(e) = self.stopped.get() {
            return Err(e.clone());
        }
        if self.cancel.as_ref().is_some_and(CancelHandle::is_cancelled)
            || self.wanted.as_ref().is_some_and(|w| !w())
        {
            return Err(self.stop(BudgetError::Cancelled { phase }));
        }
        if self.deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(self.stop(BudgetError::DeadlinePassed { phase }));
        }
        Ok(())
    }

    fn stop(&self, e: BudgetError) -> BudgetError {
        self.stopped.get_or_init(|| e).clone()
    }
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Meter>>> = const { RefCell::new(None) };
}

/// Runs `f` with `meter` installed on this thread (restoring whatever was installed
/// before, so that scopes nest and a helper thread can lend itself to several compiles).
pub fn scope<R>(meter: Option<Arc<Meter>>, f: impl FnOnce() -> R) -> R {
    struct Restore(Option<Arc<Meter>>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let prev = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = prev);
        }
    }
    let prev = CURRENT.with(|c| std::mem::replace(&mut *c.borrow_mut(), meter));
    let _restore = Restore(prev);
    f()
}

/// The meter installed on this thread, if any (for work handed to another thread).
pub fn current() -> Option<Arc<Meter>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Charges `units` of `phase`'s work to this thread's meter (nothing without one).
#[inline]
pub fn charge(phase: Phase, units: u64) -> Result<(), BudgetError> {
    CURRENT.with(|c| match &*c.borrow() {
        Some(m) => m.charge(phase, units),
        None => Ok(()),
    })
}

/// Charges `units` of a mask walk (trie nodes visited) to this thread's meter if it is a
/// fill's ([`Meter::for_fill`]); nothing otherwise.
#[inline]
pub fn charge_walk(units: u64) -> Result<(), BudgetError> {
    CURRENT.with(|c| match &*c.borrow() {
        Some(m) if m.walks => m.charge(Phase::Fill, units),
        _ => Ok(()),
    })
}

/// Looks at this thread's meter's cancellation and deadline now.
pub fn check(phase: Phase) -> Result<(), BudgetError> {
    CURRENT.with(|c| match &*c.borrow() {
        Some(m) => m.check(phase),
        None => Ok(()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_limit_stops_the_charge_that_passes_it_and_every_later_one() {
        let m = Meter::new(Some(100), None, None);
        assert_eq!(m.charge(Phase::Nfa, 60), Ok(()));
        assert_eq!(m.charge(Phase::Nfa, 40), Ok(()));
        let e = m.charge(Phase::Dfa, 1).unwrap_err();
        assert_eq!(e, BudgetError::Exceeded { phase: Phase::Dfa, spent: 101, limit: 100 });
        assert!(e.is_deterministic());
        assert_eq!(m.charge(Phase::Masks, 0), Err(e));
    }

    #[test]
    fn cancellation_and_deadline_are_seen_within_check_every_units() {
        let h = CancelHandle::new();
        let m = Meter::new(None, Some(h.clone()), None);
        assert_eq!(m.charge(Phase::Nfa, 10), Ok(()));
        h.cancel();
        let mut n = 0;
        while m.charge(Phase::Nfa, 1).is_ok() {
            n += 1;
        }
        assert!(n <= CHECK_EVERY, "{n}");
        assert!(!m.charge(Phase::Nfa, 1).unwrap_err().is_deterministic());
        let m = Meter::new(None, None, Some(Instant::now()));
        assert_eq!(m.check(Phase::Dfa), Err(BudgetError::DeadlinePassed { phase: Phase::Dfa }));
    }

    #[test]
    fn scopes_nest_and_restore() {
        let outer = Meter::new(None, None, None);
        let inner = Meter::new(None, None, None);
        scope(Some(outer.clone()), || {
            charge(Phase::Nfa, 5).unwrap();
            scope(Some(inner.clone()), || charge(Phase::Nfa, 7).unwrap());
            charge(Phase::Nfa, 1).unwrap();
        });
        assert_eq!((outer.spent(), inner.spent()), (6, 7));
        assert!(current().is_none());
        assert_eq!(charge(Phase::Nfa, 1_000), Ok(()));
    }
}
