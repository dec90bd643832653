//! The finishing work spread over the cores `--threads` allows: each pair's estimate, each
//! edge's joint centre, each search for a group's reference, each grid instant of the network
//! intervals and each instant the contradiction check looks at depend on nothing but their own
//! input, so they are mapped in parallel and collected in input order — the result is
//! the same whatever the number of threads (`tests/threads.rs`).

use std::sync::{Arc, Mutex, PoisonError};

use rayon::prelude::*;

/// `items` mapped by `f` on up to `threads` threads (rayon's work stealing: pairs differ in
/// cost by their hull sizes), in input order. One thread, one item, a pool that cannot start,
/// or a call from a task already on the pool: a plain loop on this thread.
///
/// Why not nest: a task waiting for its own parallel map steals other tasks meanwhile, and the
/// finishing's tasks meet in lazily built shared state (`OnceLock`s: a group's network plan,
/// whose grid is such a map). A task that builds one while another task on the same worker
/// waits for it to be built never finishes: `sync --threads 7` on 100 traces hung that way,
/// every worker blocked, where the report's traces (on the pool) asked for their group's plan.
/// The outer map already keeps every worker busy.
pub(crate) fn map_in_order<T, U, F>(threads: usize, items: Vec<T>, f: F) -> Vec<U>
where
    T: Send,
    U: Send,
    F: Fn(T) -> U + Sync + Send,
{
    let nested = rayon::current_thread_index().is_some();
    match pool(threads) {
        Some(pool) if items.len() > 1 && !nested => {
            pool.install(|| items.into_par_iter().map(f).collect())
        }
        _ => items.into_iter().map(f).collect(),
    }
}

/// The pool of `threads` threads, started on first use and kept for the process (every
/// use in one `sync` shares it). Memory: results built on the workers come from their own malloc
/// arenas, which cannot reuse what freed accumulators leave in the main thread's, so the peak
/// holds both (418 → 540 MB on the 600-trace benchmark with 2 threads when its pass ran on the
/// main thread; docs/analyzer.md).
fn pool(threads: usize) -> Option<Arc<rayon::ThreadPool>> {
    static POOLS: Mutex<Vec<(usize, Arc<rayon::ThreadPool>)>> = Mutex::new(Vec::new());
    if threads <= 1 {
        return None;
    }
    let mut pools = POOLS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, pool)) = pools.iter().find(|(n, _)| *n == threads) {
        return Some(pool.clone());
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .thread_name(|i| format!("tsync-finish-{i}"))
        .build()
        .ok()?;
    let pool = Arc::new(pool);
    pools.push((threads, pool.clone()));
    Some(pool)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_input_order_whatever_the_threads() {
        let items: Vec<u64> = (0..10_000).collect();
        let one = map_in_order(1, items.clone(), |x| x * x + 1);
        for threads in [2, 3, 7] {
            assert_eq!(map_in_order(threads, items.clone(), |x| x * x + 1), one);
        }
        assert_eq!(map_in_order(4, Vec::<u64>::new(), |x| x), Vec::<u64>::new());
    }

    /// A map inside a task of the pool runs on that task's thread: were its items spread, the
    /// task would steal other tasks while it waits for them, and one of those could wait for
    /// state the task itself is building (see [`map_in_order`]). Two tasks on a pool of four:
    /// spread, the two idle workers would take some of the 64 items of each inner map.
    #[test]
    fn a_map_inside_a_pool_task_stays_on_its_thread() {
        let spread = map_in_order(4, (0..2).collect(), |_| {
            let outer = rayon::current_thread_index();
            map_in_order(4, (0..64).collect(), |_| {
                std::thread::sleep(std::time::Duration::from_micros(200));
                rayon::current_thread_index() != outer
            })
            .into_iter()
            .filter(|&moved| moved)
            .count()
        });
        assert_eq!(spread, vec![0; 2]);
    }
}
