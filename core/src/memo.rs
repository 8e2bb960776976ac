//! Values built once per process from the library's own constants (a format's regex and
//! its conversion, the exponent spellings of integers), shared by every compile.

use rustc_hash::FxHashMap;
use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::{Mutex, OnceLock, PoisonError};

/// A process-wide map filled on demand. The lock is not held while a value is built, so
/// two threads may build the same one once each; the values are equal.
pub(crate) struct Memo<K, V>(OnceLock<Mutex<FxHashMap<K, V>>>);

impl<K: Hash + Eq, V: Clone> Memo<K, V> {
    pub(crate) const fn new() -> Self {
        Memo(OnceLock::new())
    }

    /// The value for `key`, built by `build` the first time (a poisoned lock only means
    /// another build panicked: the map is still sound).
    pub(crate) fn get_or<Q>(&self, key: &Q, build: impl FnOnce() -> V) -> V
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let map = self.0.get_or_init(Default::default);
        if let Some(v) = map.lock().unwrap_or_else(PoisonError::into_inner).get(key) {
            return v.clone();
        }
        let v = build();
        map.lock().unwrap_or_else(PoisonError::into_inner).insert(key.to_owned(), v.clone());
        v
    }
}
