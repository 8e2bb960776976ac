//! A compile's independent pieces (a tag's schemas, the rules' NFAs and DFAs) shared with
//! the other cores, without the compiling thread ever waiting for a core to wake up.
//!
//! rayon's parallel iterators, called from outside its pool (a server's compile task, a
//! CLI), hand the whole job to the pool and block until it is done. Waking a sleeping
//! worker costs the caller ~15 µs and the worker ~40–60 µs before it runs (2-core VM);
//! a 20-tool structural tag compiles in ~2 ms over three parallel phases, so on such a
//! compile the pool cost about what it saved.
//!
//! A crew works the other way round. The compiling thread works through every phase's
//! items itself; helpers (jobs on the rayon pool, hired by the first phase worth
//! sharing) take whatever items are left when they arrive, then wait for the next phase
//! for a while, running the pool's other work meanwhile, instead of going back to
//! sleep. The compiling thread closes a phase as soon as its items are all claimed and
//! waits only for the items a helper is in the middle of, never for a helper that has
//! not arrived: a busy pool makes a compile no slower than a serial one.
//!
//! Results come back in item order and an item's result does not depend on who computed
//! it, so the output is the same however many helpers joined (the automata's `digest`
//! test checks this).

use std::cell::RefCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How long a helper waits for the next phase before it leaves (a phase after that
/// hires again). Longer than the serial stretches of a large tool-calling compile (the
/// optimizer: ~0.3 ms with 20 tools), short enough that a long serial compile does not
/// keep a pool thread spinning.
const MAX_IDLE: Duration = Duration::from_millis(2);

/// `Board::state`: helpers inside the current phase (low bits), whether it is open, the
/// phase's number (high bits), and whether the crew was dismissed.
const INSIDE: u64 = (1 << 32) - 1;
const OPEN: u64 = 1 << 32;
const DISMISSED: u64 = 1 << 33;
const PHASE_SHIFT: u32 = 34;

/// A phase's work: every participant calls it; it returns once no item is left to claim.
type Job = dyn Fn() + Sync;

/// What the compiling thread and its helpers share.
struct Board {
    state: AtomicU64,
    /// The open phase's job. Written only while no helper is inside a phase (the phase
    /// is closed and `INSIDE` is zero), read only by a helper that entered an open phase,
    /// which the writer waits for before the job's frame ends (see `Crew::run`).
    job: std::cell::UnsafeCell<Option<*const Job>>,
    /// Helpers hired and not yet gone.
    present: AtomicUsize,
    /// The compiling thread. A helper job that this thread itself picks up (were an
    /// item to wait on rayon work, the pool could hand it its own crew's job) leaves at
    /// once: it would otherwise idle inside that item.
    owner: std::thread::ThreadId,
}

// SAFETY: `job` is accessed under the protocol described on it: the writes and reads are
// ordered by `state` (release on open / acquire on entry; release on leaving / acquire
// when the phase's closer sees no helper inside), and the pointer is only called while
// the phase it was published for is open or a helper that entered it is still inside.
unsafe impl Sync for Board {}
unsafe impl Send for Board {}

/// The compiling thread's handle on its helpers.
struct Crew {
    board: Arc<Board>,
}

impl Crew {
    fn new() -> Crew {
        let board = Board {
            state: AtomicU64::new(0),
            job: std::cell::UnsafeCell::new(None),
            present: AtomicUsize::new(0),
            owner: std::thread::current().id(),
        };
        Crew { board: Arc::new(board) }
    }

    /// Hires helpers until `wanted` are present (a helper leaves after `MAX_IDLE`).
    fn hire(&self, wanted: usize) {
        while self.board.present.load(Ordering::Acquire) < wanted {
            self.board.present.fetch_add(1, Ordering::AcqRel);
            let board = self.board.clone();
            rayon::spawn(move || help(&board));
        }
    }

    /// Opens a phase running `job` with `wanted` helpers present, runs it here, closes
    /// the phase and waits for the helpers inside it to leave.
    fn run(&self, job: &(dyn Fn() + Sync + '_), wanted: usize) {
        // SAFETY: no phase is open and no helper is inside one (the previous `run`
        // waited for that), so no helper reads `job` now. The lifetime is erased: the
        // guard below does not let this frame end while a helper may call it.
        unsafe {
            let ptr: *const Job = std::mem::transmute::<&(dyn Fn() + Sync + '_), &'static Job>(job);
            *self.board.job.get() = Some(ptr);
        }
        let phase = (self.board.state.load(Ordering::Relaxed) >> PHASE_SHIFT) + 1;
        self.board.state.store(phase << PHASE_SHIFT | OPEN, Ordering::Release);
        // Closes the phase even if `job` panics here, before this frame (and the data
        // the job borrows) goes away.
        struct Close<'a>(&'a Board);
        impl Drop for Close<'_> {
            fn drop(&mut self) {
                self.0.state.fetch_and(!OPEN, Ordering::AcqRel);
                // Helpers inside are in the middle of an item: short, unless the
                // scheduler took a helper's core away.
                let mut spins = 0u32;
                while self.0.state.load(Ordering::Acquire) & INSIDE != 0 {
                    spins = spins.wrapping_add(1);
                    if spins % 64 == 0 {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
                // SAFETY: the phase is closed and no helper is inside it.
                unsafe { *self.0.job.get() = None }
            }
        }
        let _close = Close(&self.board);
        self.hire(wanted);
        job();
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        self.board.state.fetch_or(DISMISSED, Ordering::AcqRel);
    }
}

/// A helper: joins each open phase once, until dismissed or idle for `MAX_IDLE`.
fn help(board: &Board) {
    if std::thread::current().id() == board.owner {
        board.present.fetch_sub(1, Ordering::AcqRel);
        return;
    }
    let mut joined = 0u64;
    let mut idle_since = Instant::now();
    let mut spins = 0u32;
    loop {
        let s = board.state.load(Ordering::Acquire);
        if s & DISMISSED != 0 {
            break;
        }
        let phase = s >> PHASE_SHIFT;
        if s & OPEN != 0 && phase != joined {
            if board.state.compare_exchange_weak(s, s + 1, Ordering::Acquire, Ordering::Relaxed).is_ok() {
                joined = phase;
                // SAFETY: this helper entered an open phase: `job` holds its job, which
                // stays alive until this helper leaves (decrements `INSIDE`).
                if let Some(job) = unsafe { *board.job.get() } {
                    // A panicking item leaves its result missing; the compiling thread
                    // computes it again and panics where a serial build would.
                    let _ = catch_unwind(AssertUnwindSafe(|| unsafe { (*job)() }));
                }
                board.state.fetch_sub(1, Ordering::Release);
                idle_since = Instant::now();
            }
            continue;
        }
        spins = spins.wrapping_add(1);
        if spins % 16 == 0 {
            if idle_since.elapsed() > MAX_IDLE {
                break;
            }
            // Run the pool's other work while waiting, if there is any; else let the
            // core go to whatever else wants it (the compiling thread itself, if the
            // scheduler put both on one core).
            if rayon::yield_now() != Some(rayon::Yield::Executed) {
                std::thread::yield_now();
            }
            continue;
        }
        std::hint::spin_loop();
    }
    board.present.fetch_sub(1, Ordering::AcqRel);
}

thread_local! {
    /// The crew of the compile running on this thread: `None` outside [`scope`], then
    /// `Some(None)` until a phase hires one.
    static CURRENT: RefCell<Option<Option<Arc<Crew>>>> = const { RefCell::new(None) };
}

/// Runs `f` (a compile) with a crew that its phases may hire ([`map_init`]); helpers
/// are dismissed when `f` returns. Nested scopes share the outer crew.
pub(crate) fn scope<R>(f: impl FnOnce() -> R) -> R {
    if CURRENT.with(|c| c.borrow().is_some()) {
        return f();
    }
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            // Dismisses the crew (if one was hired) as it is dropped.
            CURRENT.with(|c| c.borrow_mut().take());
        }
    }
    CURRENT.with(|c| *c.borrow_mut() = Some(None));
    let _reset = Reset;
    f()
}

/// Helpers present in this thread's compile: hired by an earlier phase and not gone yet
/// (awake, waiting for the next phase), so that work shared with them now costs no
/// wake-up. Zero outside [`scope`].
pub(crate) fn helpers_present() -> usize {
    CURRENT.with(|c| match &*c.borrow() {
        Some(Some(crew)) => crew.board.present.load(Ordering::Acquire),
        _ => 0,
    })
}

/// Helpers a crew may hire: the pool's other threads.
fn helpers() -> usize {
    rayon::current_num_threads().saturating_sub(1)
}

/// Items per helper a phase hires for: a helper that arrives 40–60 µs late and then
/// spins between phases is worth it for a share of a phase's items, not for one item
/// each (on a 16-core machine a 20-schema phase wants one, not fifteen).
const ITEMS_PER_HELPER: usize = 16;

/// Whether a [`map_init`] is shared with a crew.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Share {
    /// Never: the items are too cheap to be worth a cross-core hand-off.
    Never,
    /// With the scope's crew if an earlier phase hired one (its helpers are awake).
    IfHired,
    /// With the scope's crew, hiring it if needed; serial outside a [`scope`].
    Hire,
    /// As `Hire`, and outside a scope with a crew hired for this call only (a build
    /// large enough that one phase pays for waking the pool).
    HireAlone,
}

/// `f(state, item)` for every item, in item order, with `init()` once per participant,
/// shared with the crew as `share` says (when the pool has other threads).
pub(crate) fn map_init<T: Sync, S, R: Send>(
    items: &[T],
    share: Share,
    init: impl Fn() -> S + Sync,
    f: impl Fn(&mut S, &T) -> R + Sync,
) -> Vec<R> {
    let serial = || {
        let mut state = init();
        items.iter().map(|x| f(&mut state, x)).collect()
    };
    if share == Share::Never || items.len() < 2 || helpers() == 0 {
        return serial();
    }
    let crew = CURRENT.with(|c| match (&mut *c.borrow_mut(), share) {
        (Some(Some(crew)), _) => Some(crew.clone()),
        (Some(slot), Share::Hire | Share::HireAlone) => {
            Some(slot.get_or_insert_with(|| Arc::new(Crew::new())).clone())
        }
        (None, Share::HireAlone) => Some(Arc::new(Crew::new())),
        _ => None,
    });
    // (A phase inside one of this thread's own phases runs here, alone: the board holds
    // one job at a time.)
    let Some(crew) = crew.filter(|c| c.board.state.load(Ordering::Relaxed) & OPEN == 0) else {
        return serial();
    };
    let next = AtomicUsize::new(0);
    let done: Mutex<Vec<(usize, R)>> = Mutex::new(Vec::with_capacity(items.len()));
    // Helpers charge the compile's work budget, like the compiling thread: the count is
    // the same whoever computes an item.
    let meter = crate::budget::current();
    let job = || {
        crate::budget::scope(meter.clone(), || {
            let mut state = None;
            let mut mine = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(x) = items.get(i) else { break };
                mine.push((i, f(state.get_or_insert_with(&init), x)));
            }
            if !mine.is_empty() {
                done.lock().unwrap_or_else(|p| p.into_inner()).extend(mine);
            }
        })
    };
    // (`IfHired` takes the helpers present and hires none.)
    let wanted = match share {
        Share::IfHired => 0,
        _ => helpers().min(items.len() / ITEMS_PER_HELPER).max(1),
    };
    crew.run(&job, wanted);
    let mut done = done.into_inner().unwrap_or_else(|p| p.into_inner());
    done.sort_unstable_by_key(|&(i, _)| i);
    if done.len() == items.len() {
        return done.into_iter().map(|(_, r)| r).collect();
    }
    // An item a helper panicked on: computed here, where the panic belongs.
    let mut state = init();
    let mut done = done.into_iter().peekable();
    let mut out = Vec::with_capacity(items.len());
    for (i, x) in items.iter().enumerate() {
        match done.next_if(|&(j, _)| j == i) {
            Some((_, r)) => out.push(r),
            None => out.push(f(&mut state, x)),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pool(threads: usize) -> rayon::ThreadPool {
        rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("a pool")
    }

    /// `x²`, after work that varies with `x` (so that helpers take items out of order).
    fn square(calls: &mut u32, &x: &u64) -> u64 {
        *calls += 1;
        let mut h = x;
        for i in 0..(x % 7) * 200 {
            h = std::hint::black_box(h ^ i);
        }
        std::hint::black_box(h);
        x * x
    }

    #[test]
    fn results_come_back_in_item_order_with_or_without_helpers() {
        let items: Vec<u64> = (0..500).collect();
        let want: Vec<u64> = items.iter().map(|x| x * x).collect();
        for threads in [1, 2, 4] {
            let p = pool(threads);
            let got = p.install(|| scope(|| map_init(&items, Share::Hire, || 0u32, square)));
            assert_eq!(got, want, "{threads} threads");
            let alone = p.install(|| map_init(&items, Share::HireAlone, || 0u32, square));
            assert_eq!(alone, want, "{threads} threads, a crew for one call");
            let serial = p.install(|| map_init(&items, Share::Never, || 0u32, square));
            assert_eq!(serial, want, "{threads} threads, serial");
        }
    }

    #[test]
    fn helpers_take_items_when_they_get_there() {
        // Items long enough for a helper to arrive: some must run on another thread (if
        // none does, the crew never helps).
        let items: Vec<u32> = (0..64).collect();
        let p = pool(2);
        let (here, ids) = p.install(|| {
            let here = std::thread::current().id();
            let ids: Vec<_> = scope(|| {
                (0..5)
                    .flat_map(|_| {
                        map_init(
                            &items,
                            Share::Hire,
                            || (),
                            |_, _| {
                                std::thread::sleep(Duration::from_micros(200));
                                std::thread::current().id()
                            },
                        )
                    })
                    .collect()
            });
            (here, ids)
        });
        assert!(ids.iter().any(|&id| id != here), "no item ran on a helper");
    }

    #[test]
    fn a_panicking_item_panics_in_the_caller_and_the_crew_still_works() {
        let items: Vec<u32> = (0..200).collect();
        let p = pool(2);
        for _ in 0..3 {
            let r = p.install(|| {
                catch_unwind(|| {
                    scope(|| {
                        map_init(
                            &items,
                            Share::Hire,
                            || (),
                            |_, &x| {
                                std::thread::sleep(Duration::from_micros(20));
                                assert!(x != 150, "item 150");
                                x
                            },
                        )
                    })
                })
            });
            assert!(r.is_err());
        }
        // The pool is not poisoned and a later compile's crew works.
        let got = p.install(|| scope(|| map_init(&items, Share::Hire, || (), |_, &x| x + 1)));
        assert_eq!(got, items.iter().map(|x| x + 1).collect::<Vec<_>>());
    }

    #[test]
    fn a_compile_is_not_held_up_by_a_busy_pool() {
        // The pool's other thread is busy for 400 ms: the helper cannot arrive, and the
        // phases must finish without it, long before that thread is free.
        let p = pool(2);
        let (tx, rx) = std::sync::mpsc::channel();
        p.spawn(move || {
            tx.send(()).ok();
            std::thread::sleep(Duration::from_millis(400));
        });
        rx.recv().expect("the busy job started");
        let items: Vec<u64> = (0..100).collect();
        let (took, got) = p.install(|| {
            let start = Instant::now();
            let got = scope(|| {
                let a = map_init(&items, Share::Hire, || 0u32, square);
                let b = map_init(&items, Share::Hire, || 0u32, square);
                assert_eq!(a, b);
                a
            });
            (start.elapsed(), got)
        });
        assert_eq!(got, items.iter().map(|x| x * x).collect::<Vec<_>>());
        assert!(took < Duration::from_millis(200), "waited {took:?} for the pool");
    }
}
