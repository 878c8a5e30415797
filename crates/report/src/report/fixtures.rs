//! Reports shaped like real runs, for the summary's and the page's snapshot tests: the default
//! experiment (6 environments × 8 workloads, its figures from one run here), the same in precision
//! mode, and an RFC 2544 run.
#![cfg(test)]

use super::{EnvSummary, Overhead, Report, ResultRow};

/// (environment, workload, metric, unit, better, mean, ci95 low, high, ratio, its ci low, high):
/// one run of the default experiment on the AMD development host (2026-11-26), rounded.
type Figure =
    (&'static str, &'static str, &'static str, &'static str, &'static str, f64, f64, f64, f64, f64, f64);
pub const DEFAULT_RUN: &[Figure] = &[
    (
        "native",
        "intmix",
        "intmix_rate",
        "Mops/s",
        "higher",
        131.2,
        125.6,
        136.7,
        f64::NAN,
        f64::NAN,
        f64::NAN,
    ),
    ("container", "intmix", "intmix_rate", "Mops/s", "higher", 136.9, 122.6, 151.1, 1.046, 0.9034, 1.211),
    ("gvisor", "intmix", "intmix_rate", "Mops/s", "higher", 130.7, 125.2, 136.2, 0.991, 0.9088, 1.081),
    ("uml", "intmix", "intmix_rate", "Mops/s", "higher", 127.7, 106.4, 149.0, 0.9749, 0.792, 1.2),
    ("qemu-virtio", "intmix", "intmix_rate", "Mops/s", "higher", 50.61, 38.74, 62.48, 0.3911, 0.3409, 0.4486),
    ("qemu-e1000", "intmix", "intmix_rate", "Mops/s", "higher", 49.01, 32.1, 65.92, 0.3689, 0.2508, 0.5426),
    ("native", "cpu", "cpu_rate", "Mops/s", "higher", 481.6, 465.9, 497.3, f64::NAN, f64::NAN, f64::NAN),
    ("container", "cpu", "cpu_rate", "Mops/s", "higher", 485.7, 468.2, 503.2, 0.9995, 0.9647, 1.036),
    ("gvisor", "cpu", "cpu_rate", "Mops/s", "higher", 487.6, 479.1, 496.1, 1.004, 0.9867, 1.022),
    ("uml", "cpu", "cpu_rate", "Mops/s", "higher", 480.6, 466.1, 495.2, 0.9896, 0.9661, 1.014),
    ("qemu-virtio", "cpu", "cpu_rate", "Mops/s", "higher", 464.0, 442.3, 485.6, 0.9635, 0.9188, 1.01),
    ("qemu-e1000", "cpu", "cpu_rate", "Mops/s", "higher", 470.5, 461.7, 479.2, 0.9687, 0.9361, 1.003),
    (
        "native",
        "syscall",
        "syscall_time",
        "ns/op",
        "lower",
        262.7,
        251.3,
        274.1,
        f64::NAN,
        f64::NAN,
        f64::NAN,
    ),
    ("container", "syscall", "syscall_time", "ns/op", "lower", 277.4, 222.3, 332.5, 1.036, 0.792, 1.355),
    ("gvisor", "syscall", "syscall_time", "ns/op", "lower", 29160.0, 27260.0, 31070.0, 110.7, 105.3, 116.4),
    ("uml", "syscall", "syscall_time", "ns/op", "lower", 29390.0, 24460.0, 34310.0, 110.3, 95.84, 126.9),
    ("qemu-virtio", "syscall", "syscall_time", "ns/op", "lower", 1128.0, 763.3, 1493.0, 4.184, 2.925, 5.984),
    ("qemu-e1000", "syscall", "syscall_time", "ns/op", "lower", 1111.0, 433.4, 1788.0, 3.947, 2.239, 6.959),
    ("native", "syscall", "host_cpu_time", "ms", "lower", 2.952, 2.587, 3.318, f64::NAN, f64::NAN, f64::NAN),
    ("container", "syscall", "host_cpu_time", "ms", "lower", 3.086, 2.772, 3.399, 1.063, 0.9784, 1.156),
    ("gvisor", "syscall", "host_cpu_time", "ms", "lower", 160.4, 150.8, 170.0, 57.35, 54.26, 60.62),
    ("uml", "syscall", "host_cpu_time", "ms", "lower", 157.8, 140.1, 175.6, 54.38, 46.75, 63.24),
    ("qemu-virtio", "syscall", "host_cpu_time", "ms", "lower", 33.21, 26.77, 39.65, 10.18, 8.337, 12.42),
    ("qemu-e1000", "syscall", "host_cpu_time", "ms", "lower", 34.55, 22.44, 46.66, 11.72, 7.935, 17.31),
    ("native", "pde", "pde_time", "s", "lower", 0.01715, 0.01601, 0.01829, f64::NAN, f64::NAN, f64::NAN),
    ("container", "pde", "pde_time", "s", "lower", 0.01955, 0.01701, 0.02208, 1.23, 0.8574, 1.763),
    ("gvisor", "pde", "pde_time", "s", "lower", 0.01839, 0.01781, 0.01898, 1.085, 0.9223, 1.276),
    ("uml", "pde", "pde_time", "s", "lower", 0.02993, 0.02384, 0.03602, 1.863, 1.187, 2.924),
    ("qemu-virtio", "pde", "pde_time", "s", "lower", 1.126, 0.8713, 1.38, 67.16, 45.45, 99.24),
    ("qemu-e1000", "pde", "pde_time", "s", "lower", 1.159, 0.9558, 1.362, 72.23, 48.19, 108.3),
    ("native", "memcpy", "memcpy_time", "ms", "lower", 17.04, 15.64, 18.44, f64::NAN, f64::NAN, f64::NAN),
    ("container", "memcpy", "memcpy_time", "ms", "lower", 15.31, 11.73, 18.89, 0.9133, 0.5917, 1.41),
    ("gvisor", "memcpy", "memcpy_time", "ms", "lower", 15.79, 14.57, 17.01, 0.9214, 0.7756, 1.095),
    ("uml", "memcpy", "memcpy_time", "ms", "lower", 19.12, 13.91, 24.33, 1.132, 0.8125, 1.578),
    ("qemu-virtio", "memcpy", "memcpy_time", "ms", "lower", 104.6, 97.52, 111.6, 6.315, 4.284, 9.309),
    ("qemu-e1000", "memcpy", "memcpy_time", "ms", "lower", 116.2, 101.0, 131.4, 6.942, 4.586, 10.51),
    (
        "native",
        "tcp_stream",
        "tcp_goodput",
        "Gbit/s",
        "higher",
        14.04,
        11.93,
        16.15,
        f64::NAN,
        f64::NAN,
        f64::NAN,
    ),
    ("container", "tcp_stream", "tcp_goodput", "Gbit/s", "higher", 17.91, 13.36, 22.47, 1.198, 0.5756, 2.492),
    (
        "gvisor",
        "tcp_stream",
        "tcp_goodput",
        "Gbit/s",
        "higher",
        1.729,
        1.279,
        2.179,
        0.07564,
        0.009891,
        0.5785,
    ),
    ("uml", "tcp_stream", "tcp_goodput", "Gbit/s", "higher", 4.532, 3.002, 6.063, 0.3012, 0.137, 0.6623),
    (
        "qemu-virtio",
        "tcp_stream",
        "tcp_goodput",
        "Gbit/s",
        "higher",
        1.278,
        1.042,
        1.514,
        0.09376,
        0.06896,
        0.1275,
    ),
    (
        "qemu-e1000",
        "tcp_stream",
        "tcp_goodput",
        "Gbit/s",
        "higher",
        0.6517,
        0.2285,
        1.075,
        0.04032,
        0.01999,
        0.08133,
    ),
    (
        "native",
        "tcp_stream",
        "tcp_retransmits",
        "segments",
        "lower",
        0.0,
        f64::NAN,
        f64::NAN,
        f64::NAN,
        f64::NAN,
        f64::NAN,
    ),
    (
        "container",
        "tcp_stream",
        "tcp_retransmits",
        "segments",
        "lower",
        0.0,
        f64::NAN,
        f64::NAN,
        f64::NAN,
        f64::NAN,
        f64::NAN,
    ),
    (
        "gvisor",
        "tcp_stream",
        "tcp_retransmits",
        "segments",
        "lower",
        0.0,
        f64::NAN,
        f64::NAN,
        f64::NAN,
        f64::NAN,
        f64::NAN,
    ),
    (
        "uml",
        "tcp_stream",
        "tcp_retransmits",
        "segments",
        "lower",
        0.0,
        f64::NAN,
        f64::NAN,
        f64::NAN,
        f64::NAN,
        f64::NAN,
    ),
    (
        "qemu-virtio",
        "tcp_stream",
        "tcp_retransmits",
        "segments",
        "lower",
        0.0,
        f64::NAN,
        f64::NAN,
        f64::NAN,
        f64::NAN,
        f64::NAN,
    ),
    (
        "qemu-e1000",
        "tcp_stream",
        "tcp_retransmits",
        "segments",
        "lower",
        0.0,
        f64::NAN,
        f64::NAN,
        f64::NAN,
        f64::NAN,
        f64::NAN,
    ),
    (
        "native",
        "tcp_stream",
        "host_cpu_time",
        "ms",
        "lower",
        414.7,
        381.0,
        448.3,
        f64::NAN,
        f64::NAN,
        f64::NAN,
    ),
    ("container", "tcp_stream", "host_cpu_time", "ms", "lower", 458.8, 413.1, 504.4, 1.146, 0.6499, 2.021),
    ("gvisor", "tcp_stream", "host_cpu_time", "ms", "lower", 480.5, 415.0, 546.0, 1.131, 0.9612, 1.33),
    ("uml", "tcp_stream", "host_cpu_time", "ms", "lower", 489.3, 481.2, 497.4, 1.224, 0.7144, 2.098),
    ("qemu-virtio", "tcp_stream", "host_cpu_time", "ms", "lower", 676.8, 651.1, 702.4, 1.681, 1.048, 2.698),
    ("qemu-e1000", "tcp_stream", "host_cpu_time", "ms", "lower", 601.8, 583.6, 620.0, 1.505, 0.8568, 2.645),
    (
        "native",
        "udp_stream",
        "udp_sent_rate",
        "kpps",
        "higher",
        129.1,
        119.1,
        139.2,
        f64::NAN,
        f64::NAN,
        f64::NAN,
    ),
    ("container", "udp_stream", "udp_sent_rate", "kpps", "higher", 157.1, 64.47, 249.7, 1.034, 0.5272, 2.027),
    ("gvisor", "udp_stream", "udp_sent_rate", "kpps", "higher", 143.5, 127.7, 159.2, 1.108, 0.8607, 1.428),
    ("uml", "udp_stream", "udp_sent_rate", "kpps", "higher", 112.7, 33.7, 191.8, 0.7191, 0.2579, 2.005),
    (
        "qemu-virtio",
        "udp_stream",
        "udp_sent_rate",
        "kpps",
        "higher",
        27.92,
        10.03,
        45.82,
        0.1724,
        0.09387,
        0.3165,
    ),
    (
        "qemu-e1000",
        "udp_stream",
        "udp_sent_rate",
        "kpps",
        "higher",
        20.71,
        1.886,
        39.53,
        0.1254,
        0.06213,
        0.2532,
    ),
    (
        "native",
        "udp_stream",
        "udp_rx_socket_drops",
        "datagrams",
        "lower",
        906.2,
        -990.6,
        2803.0,
        f64::NAN,
        f64::NAN,
        f64::NAN,
    ),
    (
        "container",
        "udp_stream",
        "udp_rx_socket_drops",
        "datagrams",
        "lower",
        12630.0,
        -27560.0,
        52810.0,
        13.93,
        f64::NAN,
        f64::NAN,
    ),
    (
        "gvisor",
        "udp_stream",
        "udp_rx_socket_drops",
        "datagrams",
        "lower",
        0.0,
        f64::NAN,
        f64::NAN,
        0.0,
        f64::NAN,
        f64::NAN,
    ),
    (
        "uml",
        "udp_stream",
        "udp_rx_socket_drops",
        "datagrams",
        "lower",
        7942.0,
        -17330.0,
        33220.0,
        8.764,
        f64::NAN,
        f64::NAN,
    ),
    (
        "qemu-virtio",
        "udp_stream",
        "udp_rx_socket_drops",
        "datagrams",
        "lower",
        0.0,
        f64::NAN,
        f64::NAN,
        0.0,
        f64::NAN,
        f64::NAN,
    ),
    (
        "qemu-e1000",
        "udp_stream",
        "udp_rx_socket_drops",
        "datagrams",
        "lower",
        0.0,
        f64::NAN,
        f64::NAN,
        0.0,
        f64::NAN,
        f64::NAN,
    ),
    (
        "native",
        "tcp_rr",
        "tcp_rr_rate",
        "trans/s",
        "higher",
        25210.0,
        23450.0,
        26980.0,
        f64::NAN,
        f64::NAN,
        f64::NAN,
    ),
    (
        "container",
        "tcp_rr",
        "tcp_rr_rate",
        "trans/s",
        "higher",
        23520.0,
        18480.0,
        28550.0,
        0.9562,
        0.8281,
        1.104,
    ),
    ("gvisor", "tcp_rr", "tcp_rr_rate", "trans/s", "higher", 4099.0, 3878.0, 4319.0, 0.1625, 0.1426, 0.1852),
    ("uml", "tcp_rr", "tcp_rr_rate", "trans/s", "higher", 3845.0, 2744.0, 4945.0, 0.1551, 0.1071, 0.2246),
    (
        "qemu-virtio",
        "tcp_rr",
        "tcp_rr_rate",
        "trans/s",
        "higher",
        2400.0,
        2103.0,
        2697.0,
        0.09766,
        0.07164,
        0.1331,
    ),
    (
        "qemu-e1000",
        "tcp_rr",
        "tcp_rr_rate",
        "trans/s",
        "higher",
        2451.0,
        1899.0,
        3003.0,
        0.09936,
        0.06607,
        0.1494,
    ),
    ("native", "tcp_rr", "tcp_rr_latency", "us", "lower", 40.29, 37.59, 43.0, f64::NAN, f64::NAN, f64::NAN),
    ("container", "tcp_rr", "tcp_rr_latency", "us", "lower", 43.01, 32.47, 53.54, 1.046, 0.9055, 1.207),
    ("gvisor", "tcp_rr", "tcp_rr_latency", "us", "lower", 247.0, 233.6, 260.3, 6.163, 5.404, 7.028),
    ("uml", "tcp_rr", "tcp_rr_latency", "us", "lower", 251.5, 147.4, 355.7, 5.995, 4.424, 8.122),
    ("qemu-virtio", "tcp_rr", "tcp_rr_latency", "us", "lower", 417.8, 367.9, 467.7, 10.2, 7.488, 13.9),
    ("qemu-e1000", "tcp_rr", "tcp_rr_latency", "us", "lower", 411.6, 326.1, 497.1, 10.02, 6.667, 15.06),
];

const TCG: &str = "QEMU version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3); accel tcg (TCG: /dev/kvm is PVM (kvm_pvm), which cannot run a stock guest kernel); kernel linux-image-6.1.0-56-amd64";

/// The default experiment's report: paired, 4 launches a side, the manifest of this host.
pub fn default_run() -> Report {
    let mut r = super::summary_test_report();
    r.name = "default".into();
    r.estimate = super::paired::Estimate::Paired;
    r.trials = super::Counts { ok: 596, failed: 0, skipped: 0, pending: 0, warmup: 316 };
    r.environments = ["native", "container", "gvisor", "uml", "qemu-virtio", "qemu-e1000"]
        .iter()
        .map(|n| EnvSummary {
            name: n.to_string(),
            kind: match *n {
                "qemu-virtio" | "qemu-e1000" => "qemu".into(),
                k => k.into(),
            },
            params: serde_json::json!({}),
            launches: 4,
            start_ms_mean: None,
            start_ms: None,
            startup: None,
            baseline: (*n != "native").then(|| "native".to_string()),
            own_clock: !matches!(*n, "native" | "container"),
        })
        .collect();
    r.manifest = serde_json::json!({
        "host_cpu_model": "AMD EPYC",
        "host_cpus": 2,
        "host_memory_kib": 24683656,
        "kvm_pvm": true,
        "runtimes": {"container": "runc version 1.1.5+ds1", "gvisor": "runsc version 0.0~20221219.0", "native": null,
            "qemu-virtio": TCG, "qemu-e1000": TCG, "uml": "linux.uml 6.1.176"},
    });
    r.results = DEFAULT_RUN
        .iter()
        .map(|&(env, w, metric, unit, better, mean, lo, hi, ratio, rlo, rhi)| {
            let kind = w;
            let mut x = super::test_row(env, mean, 0.0, better);
            x.workload = w.into();
            x.kind = kind.into();
            x.metric = metric.into();
            x.unit = unit.into();
            x.launches = 4;
            x.n = 4;
            x.ci95 = (!lo.is_nan()).then_some([lo, hi]);
            x.overhead = (!ratio.is_nan()).then(|| {
                let ci = (!rlo.is_nan()).then_some([rlo, rhi]);
                Overhead {
                    estimate: "paired",
                    pairs: Some(4),
                    blocks: Some(4),
                    ..Overhead::unpaired(ratio, ci, None)
                }
            });
            x.as_recorded()
        })
        .collect::<Vec<ResultRow>>();
    r
}

/// The default run in precision mode (±5 %, 4½ minutes): each headline ratio watched, met where
/// its interval is within ±5 %, the others with what they would need; one host-wide slowdown.
pub fn precision_run() -> Report {
    let mut r = default_run();
    let mut cells = Vec::new();
    for x in r.results.iter().filter(|x| x.overhead.is_some() && x.headline) {
        let hw = x.overhead.as_ref().and_then(Overhead::relative_half_width).map(|h| h * 100.0);
        let met = hw.is_some_and(|h| h <= 5.0);
        cells.push(super::PrecisionCell {
            environment: x.environment.clone(),
            workload: x.workload.clone(),
            metric: x.metric.clone(),
            half_width_percent: hw,
            met,
            launches: 4,
            n: 4,
            needs: (!met).then(|| super::Needs {
                more_blocks: (hw.unwrap_or(100.0) * 8.0) as usize,
                seconds: hw.unwrap_or(100.0) * 3.0,
            }),
            first_trial_differs: None,
        });
    }
    r.precision = Some(super::PrecisionReport {
        target_percent: 5.0,
        level: 0.95,
        rule: "two-stage",
        budget_ms: 270_000,
        met: cells.iter().filter(|c| c.met).count(),
        cells,
    });
    r.disturbances = vec![super::disturbances::Disturbance {
        at: "2026-11-26T16:36:21.794Z".into(),
        seconds: 1.4,
        environments: 3,
        trials: Vec::new(),
        both_sides: 4,
        one_side: 1,
    }];
    r
}

/// An RFC 2544 run: native and a container, three frame sizes each.
pub fn rfc2544_run() -> Report {
    let mut r = super::summary_test_report();
    r.name = "rfc2544".into();
    r.environments.truncate(2);
    let row = |env: &str, size: u64, ndr: f64| super::rfc2544::Row {
        environment: env.into(),
        direction: "out".into(),
        frame_size: size,
        quick: false,
        line_max_fps: 1_488_095.0 * 84.0 / (size as f64 + 20.0),
        ndr_fps: Some(ndr),
        pdr_fps: Some(ndr * 1.1),
        latency_note: None,
        b2b_of: None,
        b2b_notes: Vec::new(),
        tester_drops: 0,
        lost: 0,
        dut_drops: 0,
        tester_bound: false,
        ran_throughput: true,
        ndr_confirmed: true,
        ndr_undetermined: false,
        gen_limited: false,
        dut_cpu_pct: Some(97.0),
        guest_cpu_pct: None,
        latency: serde_json::json!({"mean_us": 41.0, "p99_us": 120.0}),
        loss_curve: Vec::new(),
        b2b_mean: None,
        b2b_capped: false,
        steps: 9,
        kind: if env == "native" { "native" } else { "container" }.into(),
        mlr_ndr_fps: Some(ndr * 1.4),
        mlr_pdr_fps: Some(ndr * 1.5),
        mlr_converged: true,
        mlr_goals: vec![
            "NDR — loss ratio 0 %, trials 1–1 s, duration sum 21 s, exceed ratio 0.5, width 0.5 %".into(),
            "PDR — loss ratio 0.5 %, trials 1–1 s, duration sum 21 s, exceed ratio 0.5, width 0.5 %".into(),
        ],
        mlr_trials: 60,
        mlr_wall_ms: 90_000.0,
        ..Default::default()
    };
    r.rfc2544 = vec![
        row("native", 64, 120_000.0),
        row("native", 512, 98_000.0),
        row("native", 1518, 61_000.0),
        row("container", 64, 72_000.0),
        row("container", 512, 70_500.0),
        row("container", 1518, 52_000.0),
    ];
    r
}
