//! CPU, memory and system-call workloads (seeds 001 and 002), plus two harness workloads.

use std::hint::black_box;
use std::time::{Duration, Instant};

use crate::params::{ParamKind, ParamSpec, Params};
use crate::{sample, Better, MetricSpec, Output, RunCtx, Workload};

const GIB: u64 = 1 << 30;

/// Integer arithmetic loop: a 64-bit LCG step plus an xorshift, one "op" per iteration.
pub struct Cpu;

impl Workload for Cpu {
    fn kind(&self) -> &'static str {
        "cpu"
    }
    fn summary(&self) -> &'static str {
        "integer arithmetic loop (multiply, add, shift, xor per op); no memory traffic"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[ParamSpec {
            name: "iterations",
            kind: ParamKind::Int { min: 1, max: 1 << 40 },
            default: Some("50000000"),
            help: "loop iterations (ops) per trial",
        }]
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        &[MetricSpec {
            name: "cpu_rate",
            unit: "Mops/s",
            better: Better::Higher,
            help: "loop iterations per second",
        }]
    }
    fn run(&self, p: &Params, _ctx: &RunCtx) -> Result<Output, String> {
        let n = p.u64("iterations")?;
        let t0 = Instant::now();
        let mut x: u64 = black_box(0x9E37_79B9_7F4A_7C15);
        for _ in 0..n {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1_442_695_040_888_963_407);
            x ^= x >> 29;
        }
        black_box(x);
        let s = t0.elapsed().as_secs_f64();
        Ok(vec![sample("cpu_rate", n as f64 / s / 1e6, "Mops/s")].into())
    }
}

/// Jacobi relaxation of Laplace's equation on an N×N grid with fixed boundaries
/// (the practicum's PDE solver, seed 001 §4, scaled to a parameter).
pub struct Pde;

impl Workload for Pde {
    fn kind(&self) -> &'static str {
        "pde"
    }
    fn summary(&self) -> &'static str {
        "Jacobi relaxation on an N×N grid (5-point stencil, two buffers), like the practicum's PDE solver"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "n",
                kind: ParamKind::Int { min: 3, max: 16384 },
                default: Some("256"),
                help: "grid side",
            },
            ParamSpec {
                name: "iterations",
                kind: ParamKind::Int { min: 1, max: 1_000_000 },
                default: Some("1000"),
                help: "relaxation sweeps",
            },
        ]
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        &[MetricSpec { name: "pde_time", unit: "s", better: Better::Lower, help: "time to run all sweeps" }]
    }
    fn run(&self, p: &Params, _ctx: &RunCtx) -> Result<Output, String> {
        let n = p.u64("n")? as usize;
        let iters = p.u64("iterations")?;
        let mut a = vec![0.0f64; n * n];
        // Boundary: top edge hot (1.0), others cold.
        a[..n].fill(1.0);
        let mut b = a.clone();
        let t0 = Instant::now();
        for _ in 0..iters {
            for i in 1..n - 1 {
                let row = i * n;
                for j in 1..n - 1 {
                    let k = row + j;
                    b[k] = 0.25 * (a[k - 1] + a[k + 1] + a[k - n] + a[k + n]);
                }
            }
            std::mem::swap(&mut a, &mut b);
        }
        black_box(&a);
        Ok(vec![sample("pde_time", t0.elapsed().as_secs_f64(), "s")].into())
    }
}

thread_local! {
    static MEMCPY_BUFFERS: std::cell::RefCell<(Vec<u8>, Vec<u8>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// The avionics paper's memory test (seed 002): copy `size` bytes `copies` times.
pub struct Memcpy;

impl Workload for Memcpy {
    fn kind(&self) -> &'static str {
        "memcpy"
    }
    fn summary(&self) -> &'static str {
        "copy a buffer of `size` bytes `copies` times (seed 002: 10 MB × 10); buffers are touched before timing"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "size",
                kind: ParamKind::Size { min: 1, max: 16 * GIB },
                default: Some("10MiB"),
                help: "bytes per copy",
            },
            ParamSpec {
                name: "copies",
                kind: ParamKind::Int { min: 1, max: 1_000_000 },
                default: Some("10"),
                help: "copies per trial",
            },
        ]
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        &[MetricSpec { name: "memcpy_time", unit: "ms", better: Better::Lower, help: "time for all copies" }]
    }
    fn run(&self, p: &Params, _ctx: &RunCtx) -> Result<Output, String> {
        let size = usize::try_from(p.u64("size")?).map_err(|_| "size does not fit in memory".to_string())?;
        let copies = p.u64("copies")?;
        // The agent keeps the last pair of buffers: repeated trials then cost what they measure
        // (the copies), not the allocation and page faults around them.
        MEMCPY_BUFFERS.with(|cell| {
            let mut bufs = cell.borrow_mut();
            if bufs.0.len() != size {
                *bufs = (Vec::new(), Vec::new()); // free the old pair first
                let src: Vec<u8> = (0..size).map(|i| i as u8).collect();
                let mut dst = vec![0u8; size];
                dst.copy_from_slice(&src); // fault the pages in before any clock starts
                *bufs = (src, dst);
            }
            let (src, dst) = &mut *bufs;
            let t0 = Instant::now();
            for i in 0..copies {
                dst.copy_from_slice(black_box(src));
                black_box(&mut *dst)[0] = i as u8;
            }
            let ms = t0.elapsed().as_secs_f64() * 1e3;
            black_box(&dst);
            Ok(vec![sample("memcpy_time", ms, "ms")].into())
        })
    }
}

/// STREAM-style sustained memory bandwidth: copy, scale, add, triad over f64 arrays.
pub struct Stream;

impl Workload for Stream {
    fn kind(&self) -> &'static str {
        "stream"
    }
    fn summary(&self) -> &'static str {
        "STREAM kernels copy/scale/add/triad; best of `ntimes` passes after the first, as STREAM reports"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[
            ParamSpec {
                name: "elements",
                kind: ParamKind::Int { min: 1000, max: 1 << 31 },
                default: Some("4000000"),
                help: "f64 elements per array (3 arrays; keep each well above the last-level cache)",
            },
            ParamSpec {
                name: "ntimes",
                kind: ParamKind::Int { min: 2, max: 1000 },
                default: Some("5"),
                help: "passes; the first is discarded",
            },
        ]
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        &[
            MetricSpec { name: "stream_copy", unit: "GB/s", better: Better::Higher, help: "c = a" },
            MetricSpec { name: "stream_scale", unit: "GB/s", better: Better::Higher, help: "b = q·c" },
            MetricSpec { name: "stream_add", unit: "GB/s", better: Better::Higher, help: "c = a + b" },
            MetricSpec { name: "stream_triad", unit: "GB/s", better: Better::Higher, help: "a = b + q·c" },
        ]
    }
    fn run(&self, p: &Params, _ctx: &RunCtx) -> Result<Output, String> {
        let n = p.u64("elements")? as usize;
        let ntimes = p.u64("ntimes")?;
        let (mut a, mut b, mut c) = (vec![1.0f64; n], vec![2.0f64; n], vec![0.0f64; n]);
        let q = black_box(3.0);
        let mut best = [f64::INFINITY; 4];
        for pass in 0..ntimes {
            let mut times = [0.0; 4];
            let t = Instant::now();
            c.copy_from_slice(&a);
            times[0] = t.elapsed().as_secs_f64();
            let t = Instant::now();
            b.iter_mut().zip(&c).for_each(|(b, c)| *b = q * c);
            times[1] = t.elapsed().as_secs_f64();
            let t = Instant::now();
            c.iter_mut().zip(a.iter().zip(&b)).for_each(|(c, (a, b))| *c = a + b);
            times[2] = t.elapsed().as_secs_f64();
            let t = Instant::now();
            a.iter_mut().zip(b.iter().zip(&c)).for_each(|(a, (b, c))| *a = b + q * c);
            times[3] = t.elapsed().as_secs_f64();
            black_box((&a, &b, &c));
            if pass > 0 {
                for k in 0..4 {
                    best[k] = best[k].min(times[k].max(1e-9));
                }
            }
        }
        let bytes = [16.0, 16.0, 24.0, 24.0].map(|per| per * n as f64);
        let names = ["stream_copy", "stream_scale", "stream_add", "stream_triad"];
        Ok((0..4).map(|k| sample(names[k], bytes[k] / best[k] / 1e9, "GB/s")).collect::<Vec<_>>().into())
    }
}

/// A cheap system call in a loop: `getppid` via `syscall(2)` so that no libc cache answers it.
pub struct Syscall;

impl Workload for Syscall {
    fn kind(&self) -> &'static str {
        "syscall"
    }
    fn summary(&self) -> &'static str {
        "getppid(2) through syscall(2) in a loop: the cost of entering and leaving the kernel"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[ParamSpec {
            name: "iterations",
            kind: ParamKind::Int { min: 1, max: 1 << 34 },
            default: Some("1000000"),
            help: "system calls per trial",
        }]
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        &[MetricSpec {
            name: "syscall_time",
            unit: "ns/op",
            better: Better::Lower,
            help: "time per system call",
        }]
    }
    fn run(&self, p: &Params, _ctx: &RunCtx) -> Result<Output, String> {
        let n = p.u64("iterations")?;
        let t0 = Instant::now();
        for _ in 0..n {
            // SAFETY: getppid takes no arguments, cannot fail and touches no memory of ours.
            black_box(unsafe { libc::syscall(libc::SYS_getppid) });
        }
        Ok(vec![sample("syscall_time", t0.elapsed().as_nanos() as f64 / n as f64, "ns/op")].into())
    }
}

/// Sleeps; reports how late the wake-up was. Used by the harness's own tests (a trial that
/// outlives its deadline) and as a first look at timer behaviour.
pub struct Sleep;

impl Workload for Sleep {
    fn kind(&self) -> &'static str {
        "sleep"
    }
    fn summary(&self) -> &'static str {
        "sleep for `duration` and report the oversleep (timer wake-up lateness)"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[ParamSpec {
            name: "duration",
            kind: ParamKind::Duration { min_ms: 1, max_ms: 24 * 3600 * 1000 },
            default: Some("10ms"),
            help: "how long to sleep",
        }]
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        &[MetricSpec {
            name: "sleep_overshoot",
            unit: "us",
            better: Better::Lower,
            help: "wake-up time minus requested time",
        }]
    }
    fn run(&self, p: &Params, ctx: &RunCtx) -> Result<Output, String> {
        let want = Duration::from_millis(p.u64("duration")?);
        let t0 = Instant::now();
        // Long sleeps in slices, so that `stop` ends them; the last slice is exact.
        while want.saturating_sub(t0.elapsed()) > Duration::from_millis(100) {
            if ctx.stopped() {
                return Err("stopped before the end of the sleep".into());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        std::thread::sleep(want.saturating_sub(t0.elapsed()));
        let late = t0.elapsed().saturating_sub(want);
        Ok(vec![sample("sleep_overshoot", late.as_secs_f64() * 1e6, "us")].into())
    }
}

/// Does nothing: a trial of it measures the harness's own cost (agent round trip, storage).
pub struct Noop;

impl Workload for Noop {
    fn kind(&self) -> &'static str {
        "noop"
    }
    fn summary(&self) -> &'static str {
        "does nothing; its trials measure the harness's own per-trial cost"
    }
    fn params(&self) -> &'static [ParamSpec] {
        &[]
    }
    fn metrics(&self) -> &'static [MetricSpec] {
        &[]
    }
    fn run(&self, _p: &Params, _ctx: &RunCtx) -> Result<Output, String> {
        Ok(Output::default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn params(w: &dyn Workload, kv: &[(&str, serde_json::Value)]) -> BTreeMap<String, serde_json::Value> {
        let given = kv.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        crate::params::revalidate(w.params(), &given).unwrap()
    }

    #[test]
    fn pde_converges_towards_the_boundary_mean() {
        // Sanity of the stencil: more sweeps take longer; the result is finite.
        let p = params(&Pde, &[("n", 32.into()), ("iterations", 50.into())]);
        let s = Pde.run(&Params(&p), &RunCtx::detached()).unwrap().samples;
        assert!(s[0].value > 0.0);
    }

    #[test]
    fn sleep_never_reports_negative_lateness() {
        let p = params(&Sleep, &[("duration", 2.into())]);
        let s = Sleep.run(&Params(&p), &RunCtx::detached()).unwrap().samples;
        assert!(s[0].value >= 0.0);
    }

    #[test]
    fn memcpy_time_scales_with_copies() {
        let one = params(&Memcpy, &[("size", (1u64 << 20).into()), ("copies", 1.into())]);
        let many = params(&Memcpy, &[("size", (1u64 << 20).into()), ("copies", 50.into())]);
        let t1: f64 = (0..5)
            .map(|_| Memcpy.run(&Params(&one), &RunCtx::detached()).unwrap().samples[0].value)
            .fold(f64::MAX, f64::min);
        let t50: f64 = (0..5)
            .map(|_| Memcpy.run(&Params(&many), &RunCtx::detached()).unwrap().samples[0].value)
            .fold(f64::MAX, f64::min);
        assert!(t50 > 5.0 * t1, "50 copies ({t50} ms) should take far longer than 1 ({t1} ms)");
    }
}
