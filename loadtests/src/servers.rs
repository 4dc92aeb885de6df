//! The runtime the in-process servers (sample upstreams, the ceiling) run on. It has its own
//! worker threads, as the proxy has its own process: a server then never queues behind the
//! clients' tasks on a shared scheduler, and the direct and ceiling sides are measured under
//! the same conditions as the proxy side. The OS still shares the machine's cores among all.

use std::future::Future;
use std::sync::OnceLock;

use tokio::runtime::{Builder, Handle, Runtime};

/// Created on first use and kept for the life of the process (a runtime cannot be dropped
/// from async code, and every run needs it again).
static RUNTIME: OnceLock<Runtime> = OnceLock::new();

fn handle() -> &'static Handle {
    RUNTIME
        .get_or_init(|| {
            let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
            Builder::new_multi_thread()
                .worker_threads(workers)
                .thread_name("resmux-load-server")
                .enable_all()
                .build()
                .expect("server runtime starts")
        })
        .handle()
}

/// Runs `fut` (typically a server's start, which spawns its accept loop where it runs) on the
/// server runtime and returns its output.
pub async fn on_servers<F, T>(fut: F) -> T
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    match handle().spawn(fut).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}
