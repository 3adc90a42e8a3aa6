//! Copy-on-write containers for the snapshot's large indexes (one entry per cluster, score or
//! placement): a clone copies a few dozen pointers, and a change after a clone copies one shard
//! or chunk rather than the whole index. With 10,000 clusters a whole-index copy at every
//! watch event that overlaps a pass would have become the controller's main cost.

use std::borrow::Borrow;
use std::collections::HashMap;
use std::hash::{BuildHasher, BuildHasherDefault, DefaultHasher, Hash};
use std::sync::Arc;

const SHARDS: usize = 64;
const CHUNK: usize = 256;

/// A hash map in `SHARDS` shared shards.
#[derive(Clone)]
pub(crate) struct ShardedMap<K, V> {
    shards: Arc<Vec<Arc<HashMap<K, V>>>>,
}

impl<K, V> Default for ShardedMap<K, V> {
    fn default() -> Self {
        Self {
            shards: Arc::new((0..SHARDS).map(|_| Arc::default()).collect()),
        }
    }
}

/// The shard of a key: a fixed hash, equal for `K` and what it borrows as (as for `HashMap`).
fn shard<Q: Hash + ?Sized>(key: &Q) -> usize {
    let h = BuildHasherDefault::<DefaultHasher>::default().hash_one(key);
    usize::try_from(h % SHARDS as u64).unwrap_or(0)
}

impl<K: Hash + Eq + Clone, V: Clone> ShardedMap<K, V> {
    fn shard_mut(&mut self, i: usize) -> &mut HashMap<K, V> {
        Arc::make_mut(&mut Arc::make_mut(&mut self.shards)[i])
    }

    pub(crate) fn get<Q>(&self, key: &Q) -> Option<&V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.shards[shard(key)].get(key)
    }

    pub(crate) fn get_mut<Q>(&mut self, key: &Q) -> Option<&mut V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let i = shard(key);
        if !self.shards[i].contains_key(key) {
            return None;
        }
        self.shard_mut(i).get_mut(key)
    }

    pub(crate) fn get_or_default(&mut self, key: K) -> &mut V
    where
        V: Default,
    {
        self.shard_mut(shard(&key)).entry(key).or_default()
    }

    pub(crate) fn insert(&mut self, key: K, value: V) -> Option<V> {
        self.shard_mut(shard(&key)).insert(key, value)
    }

    pub(crate) fn remove<Q>(&mut self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let i = shard(key);
        if !self.shards[i].contains_key(key) {
            return None;
        }
        self.shard_mut(i).remove(key)
    }

    pub(crate) fn len(&self) -> usize {
        self.shards.iter().map(|s| s.len()).sum()
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = (&K, &V)> {
        self.shards.iter().flat_map(|s| s.iter())
    }
}

/// A vector of optional entries in shared chunks of `CHUNK`.
#[derive(Clone)]
pub(crate) struct Chunked<T> {
    chunks: Arc<Vec<Arc<Vec<Option<T>>>>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Self {
            chunks: Arc::default(),
            len: 0,
        }
    }
}

impl<T: Clone> Chunked<T> {
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn get(&self, i: usize) -> Option<&T> {
        self.chunks.get(i / CHUNK)?.get(i % CHUNK)?.as_ref()
    }

    fn cell_mut(&mut self, i: usize) -> Option<&mut Option<T>> {
        let chunk = Arc::make_mut(&mut self.chunks).get_mut(i / CHUNK)?;
        Arc::make_mut(chunk).get_mut(i % CHUNK)
    }

    pub(crate) fn get_mut(&mut self, i: usize) -> Option<&mut T> {
        self.get(i)?;
        self.cell_mut(i)?.as_mut()
    }

    /// Sets entry `i`; `i == len()` appends.
    pub(crate) fn set(&mut self, i: usize, value: Option<T>) {
        if i < self.len {
            if let Some(cell) = self.cell_mut(i) {
                *cell = value;
            }
            return;
        }
        let chunks = Arc::make_mut(&mut self.chunks);
        if self.len.is_multiple_of(CHUNK) {
            chunks.push(Arc::new(Vec::with_capacity(CHUNK)));
        }
        if let Some(last) = chunks.last_mut() {
            Arc::make_mut(last).push(value);
            self.len += 1;
        }
    }

    pub(crate) fn take(&mut self, i: usize) -> Option<T> {
        self.get(i)?;
        self.cell_mut(i)?.take()
    }
}
