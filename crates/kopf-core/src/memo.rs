//! Memos: in-memory values kept per object while the operator runs (Kopf's `memo`).
//!
//! The operator registers values of any `Clone + Send + Sync` type ([`MemoSeed::insert`]);
//! each object gets its own copy of each value the first time a handler asks for it, and
//! keeps it until the object is gone. A handler asks with the [`Memo<T>`] extractor.
//!
//! ```
//! use kopf_core::memo::{Memo, MemoSeed, Memos};
//!
//! #[derive(Clone, Default)]
//! struct Seen { count: u32 }
//!
//! let mut seed = MemoSeed::default();
//! seed.insert(Seen::default());
//! let object = Memos::new(seed.into());
//! let memo: Memo<Seen> = object.get().expect("registered");
//! memo.update(|s| s.count += 1);
//! assert_eq!(object.get::<Seen>().expect("same value").get().count, 1);
//! ```

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

type Factory = Arc<dyn Fn() -> Box<dyn Any + Send + Sync> + Send + Sync>;

/// The operator-wide memo: the values each object's memo starts from. Activities (startup
/// handlers...) see these values themselves ([`Memos::operator`]), so what a startup handler
/// sets is what objects first seen afterwards get a copy of.
#[derive(Clone, Default)]
pub struct MemoSeed {
    /// Per type: its name, a copy of the current value, and the shared value itself.
    factories: HashMap<TypeId, (&'static str, Factory, Factory)>,
}

impl std::fmt::Debug for MemoSeed {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.factories.values().map(|(name, _, _)| name))
            .finish()
    }
}

impl MemoSeed {
    /// Registers a value; every object starts with its own clone of it.
    pub fn insert<T: Clone + Send + Sync + 'static>(&mut self, value: T) {
        let shared = Arc::new(Mutex::new(value));
        let proto = shared.clone();
        let copy: Factory = Arc::new(move || {
            let value = proto.lock().unwrap_or_else(|e| e.into_inner()).clone();
            Box::new(Arc::new(Mutex::new(value)))
        });
        let share: Factory = Arc::new(move || Box::new(shared.clone()));
        self.factories
            .insert(TypeId::of::<T>(), (std::any::type_name::<T>(), copy, share));
    }
}

/// One object's memo: its values by type.
#[derive(Clone, Default)]
pub struct Memos {
    seed: Arc<MemoSeed>,
    values: Arc<Mutex<HashMap<TypeId, Box<dyn Any + Send + Sync>>>>,
    /// The operator's own values, not copies (for activities).
    operator: bool,
}

impl std::fmt::Debug for Memos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memos").field("seed", &self.seed).finish()
    }
}

/// A memo value of a type the operator did not register.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "the handler asks for Memo<{type_name}>, but the operator has no memo of that type: register one with Operator::memo(...)"
)]
pub struct MemoMissing {
    /// The type asked for.
    pub type_name: &'static str,
}

impl Memos {
    /// An empty memo for a new object, seeded from the operator's memo.
    pub fn new(seed: Arc<MemoSeed>) -> Self {
        Memos {
            seed,
            values: Arc::default(),
            operator: false,
        }
    }

    /// Whether no handler has asked for any value yet (then a fresh [`Memos::new`] is the
    /// same memo, and nothing of it needs keeping).
    ///
    /// ```
    /// use kopf_core::memo::{MemoSeed, Memos};
    /// let mut seed = MemoSeed::default();
    /// seed.insert(0u32);
    /// let memo = Memos::new(seed.into());
    /// assert!(memo.is_untouched());
    /// memo.get::<u32>().expect("registered").set(1);
    /// assert!(!memo.is_untouched());
    /// ```
    pub fn is_untouched(&self) -> bool {
        self.values
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// The operator-wide memo itself (for activities): changes are seen by every object's
    /// copy made afterwards.
    pub fn operator(seed: Arc<MemoSeed>) -> Self {
        Memos {
            seed,
            values: Arc::default(),
            operator: true,
        }
    }

    /// The object's value of type `T`, created from the operator's on first use.
    pub fn get<T: Send + Sync + 'static>(&self) -> Result<Memo<T>, MemoMissing> {
        let missing = || MemoMissing {
            type_name: std::any::type_name::<T>(),
        };
        let mut values = self.values.lock().unwrap_or_else(|e| e.into_inner());
        let entry = match values.entry(TypeId::of::<T>()) {
            std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
            std::collections::hash_map::Entry::Vacant(v) => {
                let (_, copy, share) = self
                    .seed
                    .factories
                    .get(&TypeId::of::<T>())
                    .ok_or_else(missing)?;
                v.insert(if self.operator { share() } else { copy() })
            }
        };
        entry
            .downcast_ref::<Arc<Mutex<T>>>()
            .cloned()
            .map(Memo)
            .ok_or_else(missing)
    }
}

/// One memo value of the object being handled (an extractor argument of handlers).
/// Clones share the value. Do not hold [`lock`](Memo::lock)'s guard across an `.await`.
#[derive(Debug)]
pub struct Memo<T>(Arc<Mutex<T>>);

impl<T> Clone for Memo<T> {
    fn clone(&self) -> Self {
        Memo(self.0.clone())
    }
}

impl<T> Memo<T> {
    /// Locks the value.
    pub fn lock(&self) -> MutexGuard<'_, T> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A copy of the value.
    pub fn get(&self) -> T
    where
        T: Clone,
    {
        self.lock().clone()
    }

    /// Replaces the value.
    pub fn set(&self, value: T) {
        *self.lock() = value;
    }

    /// Changes the value in place and returns what the closure returns.
    pub fn update<R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        f(&mut self.lock())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_object_gets_its_own_copy_of_the_seed() {
        let mut seed = MemoSeed::default();
        seed.insert(vec![1u8]);
        let seed = Arc::new(seed);
        let a = Memos::new(seed.clone());
        let b = Memos::new(seed);
        a.get::<Vec<u8>>().expect("seeded").update(|v| v.push(2));
        assert_eq!(a.get::<Vec<u8>>().expect("kept").get(), vec![1, 2]);
        assert_eq!(b.get::<Vec<u8>>().expect("own copy").get(), vec![1]);
        let missing = a.get::<String>().expect_err("not registered");
        assert!(missing.to_string().contains("Memo<alloc::string::String>"));
    }

    #[test]
    fn activities_change_what_later_objects_copy() {
        let mut seed = MemoSeed::default();
        seed.insert(String::from("unset"));
        let seed = Arc::new(seed);
        let early = Memos::new(seed.clone());
        assert_eq!(early.get::<String>().expect("seeded").get(), "unset");
        Memos::operator(seed.clone())
            .get::<String>()
            .expect("seeded")
            .set("from startup".into());
        let late = Memos::new(seed);
        assert_eq!(late.get::<String>().expect("seeded").get(), "from startup");
        // Copies made before keep their value.
        assert_eq!(early.get::<String>().expect("kept").get(), "unset");
    }
}
