//! A replacement policy written in Python, plugged into the engine as a [`DynPolicy`] (libCacheSim's
//! `PythonHookCachePolicy` is the model).
//!
//! The Python object decides; this side keeps the set of resident blocks, so `contains` and `len` never call
//! Python, and checks every decision. Hooks, called with the GIL taken for each call:
//! - `access(key)`: a demand access to a resident block (a hit);
//! - `insert(key, prefetched)`: a block enters (a demand miss, or a prefetch when `prefetched`);
//! - `evict() -> key`: the cache is full; name a resident block to evict;
//! - `remove(key)`: a resident block leaves without an eviction (invalidated by a write-around write, TRIM).
//!
//! Keys are the engine's packed block keys: volume in the top 16 bits, block number in the low 48.
//!
//! A hook that raises, or an `evict()` that names a block not in the cache, is recorded ([`HookErrors`]) and
//! the step finishes consistently (the smallest resident key is evicted instead); the Python caller then gets
//! the first error raised from the call that caused it. Memory: 17 bytes of hash map per resident block on this
//! side, plus whatever the Python object keeps.

use blockwell_core::policy::{Access, DynPolicy, Evicted, Outcome};
use blockwell_core::BlockKey;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The first error a hook raised since the caller last looked.
#[derive(Clone, Default)]
pub(crate) struct HookErrors(Arc<Mutex<Option<PyErr>>>);

impl HookErrors {
    fn record(&self, e: PyErr) {
        if let Ok(mut slot) = self.0.lock() {
            slot.get_or_insert(e);
        }
    }

    /// Raises the recorded error, if any (and forgets it).
    pub(crate) fn check(&self) -> PyResult<()> {
        match self.0.lock().ok().and_then(|mut s| s.take()) {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

pub(crate) struct PyPolicy {
    obj: Py<PyAny>,
    capacity: usize,
    /// Resident blocks, each with whether it came by prefetch and was not yet demanded.
    resident: HashMap<u64, bool>,
    errors: HookErrors,
}

impl PyPolicy {
    pub(crate) fn new(obj: Py<PyAny>, capacity: usize, errors: HookErrors) -> Self {
        PyPolicy { obj, capacity, resident: HashMap::new(), errors }
    }

    fn call<'py>(&self, py: Python<'py>, hook: &str, args: impl IntoPyObjectExt) -> Option<Bound<'py, PyAny>> {
        match args.call_on(self.obj.bind(py), hook) {
            Ok(v) => Some(v),
            Err(e) => {
                self.errors.record(e);
                None
            }
        }
    }

    /// Makes room for one block: Python names the victim.
    fn evict_one(&mut self, py: Python<'_>, out: &mut Vec<Evicted>) {
        let named = self.call(py, "evict", ()).and_then(|v| match v.extract::<u64>() {
            Ok(k) if self.resident.contains_key(&k) => Some(k),
            Ok(k) => {
                self.errors.record(PyValueError::new_err(format!("evict() returned {k}, which is not in the cache")));
                None
            }
            Err(_) => {
                self.errors.record(PyValueError::new_err(format!("evict() returned {v}, not a block key (an int)")));
                None
            }
        });
        let Some(victim) = named.or_else(|| self.resident.keys().min().copied()) else { return };
        let unused_prefetch = self.resident.remove(&victim).unwrap_or(false);
        out.push(Evicted { key: BlockKey::from_raw(victim), unused_prefetch });
    }

    /// A resident block's demand access.
    fn hit_resident(&mut self, py: Python<'_>, k: u64) -> Outcome {
        let prefetched = self.resident.insert(k, false).unwrap_or(false);
        self.call(py, "access", (k,));
        if prefetched {
            Outcome::PrefetchHit
        } else {
            Outcome::Hit
        }
    }

    fn insert(&mut self, py: Python<'_>, k: u64, prefetched: bool, out: &mut Vec<Evicted>) {
        if self.resident.len() >= self.capacity {
            self.evict_one(py, out);
        }
        self.resident.insert(k, prefetched);
        self.call(py, "insert", (k, prefetched));
    }
}

/// Calls a method with positional arguments (a small shim over PyO3's call API).
pub(crate) trait IntoPyObjectExt {
    fn call_on<'py>(self, obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Bound<'py, PyAny>>;
}

impl IntoPyObjectExt for () {
    fn call_on<'py>(self, obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        obj.call_method0(name)
    }
}

impl IntoPyObjectExt for (u64,) {
    fn call_on<'py>(self, obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        obj.call_method1(name, self)
    }
}

impl IntoPyObjectExt for (u64, bool) {
    fn call_on<'py>(self, obj: &Bound<'py, PyAny>, name: &str) -> PyResult<Bound<'py, PyAny>> {
        obj.call_method1(name, self)
    }
}

impl DynPolicy for PyPolicy {
    fn capacity(&self) -> usize {
        self.capacity
    }

    fn len(&self) -> usize {
        self.resident.len()
    }

    fn contains(&self, key: BlockKey) -> bool {
        self.resident.contains_key(&key.raw())
    }

    fn access(&mut self, access: Access, out: &mut Vec<Evicted>) -> Outcome {
        let k = access.key.raw();
        Python::attach(|py| {
            if self.resident.contains_key(&k) {
                self.hit_resident(py, k)
            } else {
                self.insert(py, k, false, out);
                Outcome::Miss
            }
        })
    }

    fn hit(&mut self, access: Access, _out: &mut Vec<Evicted>) -> Option<Outcome> {
        let k = access.key.raw();
        self.resident.contains_key(&k).then(|| Python::attach(|py| self.hit_resident(py, k)))
    }

    fn prefetch(&mut self, group: &[Access], out: &mut Vec<Evicted>) -> usize {
        Python::attach(|py| {
            let mut n = 0;
            for a in group {
                let k = a.key.raw();
                if !self.resident.contains_key(&k) {
                    self.insert(py, k, true, out);
                    n += 1;
                }
            }
            n
        })
    }

    fn remove(&mut self, key: BlockKey) -> bool {
        let k = key.raw();
        if self.resident.remove(&k).is_none() {
            return false;
        }
        Python::attach(|py| {
            self.call(py, "remove", (k,));
        });
        true
    }

    fn validate(&self) -> Result<(), String> {
        if self.resident.len() > self.capacity {
            return Err(format!("{} blocks resident, capacity {}", self.resident.len(), self.capacity));
        }
        Ok(())
    }

    fn heap_bytes(&self) -> usize {
        self.resident.capacity() * (std::mem::size_of::<(u64, bool)>() + 1)
    }
}
