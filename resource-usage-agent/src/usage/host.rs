//! The `host` source: the machine the agent runs on, read with sysinfo, for single-node and
//! edge clusters and for a local demo. Free CPU is the idle share of the CPUs since the last
//! reading (actual use, not requests); free memory is the kernel's `MemAvailable`.

use std::time::Duration;

use sysinfo::{CpuRefreshKind, MemoryRefreshKind, RefreshKind, System};
use tokio::time::Instant;

use ocm_api::score::resource_usage::{Free, Resource};

/// A reading of the machine.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostReading {
    pub cpus: usize,
    /// Cores idle on average since the previous reading.
    pub free_cores: f64,
    pub total_memory: u64,
    pub available_memory: u64,
}

impl HostReading {
    /// CPU and memory, the same at node and cluster scope (one machine).
    pub fn free(&self) -> Free {
        let mut free = Free::default();
        free.set(Resource::Cpu, self.free_cores, Some(self.free_cores));
        let mem = self.available_memory as f64;
        free.set(Resource::Memory, mem, Some(mem));
        free
    }
}

pub struct HostSource {
    system: System,
    last: Instant,
}

impl HostSource {
    pub fn new() -> Result<Self, sysinfo::Error> {
        let system = System::new_with_specifics(
            RefreshKind::nothing()
                .with_cpu(CpuRefreshKind::nothing().with_usage())
                .with_memory(MemoryRefreshKind::nothing().with_ram()),
        )?;
        Ok(Self {
            system,
            last: Instant::now(),
        })
    }

    /// Reads the machine. CPU usage needs two samples some time apart; the first reading
    /// waits for sysinfo's minimum interval after construction.
    pub async fn read(&mut self) -> HostReading {
        let since = self.last.elapsed();
        let min = sysinfo::MINIMUM_CPU_UPDATE_INTERVAL.max(Duration::from_millis(200));
        if since < min {
            tokio::time::sleep(min - since).await;
        }
        self.system.refresh_cpu_usage();
        self.system.refresh_memory();
        self.last = Instant::now();
        let cpus = self.system.cpus().len();
        let busy = f64::from(self.system.global_cpu_usage()).clamp(0.0, 100.0) / 100.0;
        HostReading {
            cpus,
            free_cores: cpus as f64 * (1.0 - busy),
            total_memory: self.system.total_memory(),
            available_memory: self.system.available_memory(),
        }
    }
}
