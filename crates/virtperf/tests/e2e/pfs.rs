//! Seed 001's parallel file system: GlusterFS servers in two instances, a client on the tester.

use crate::util::*;
use crate::Outcome;

fn need_gluster() -> Option<String> {
    need_root_and_env("container").or_else(|| need_root_and("glusterfs")).or_else(|| {
        (!gluster_processes().is_empty()).then(|| {
            format!(
                "GlusterFS processes already run on this host (not the test's): {:?}",
                gluster_processes()
            )
        })
    })
}

/// A 2-server volume on native and in containers (with Docker's capabilities and SYS_ADMIN): the
/// client on the tester writes and reads through FUSE, the file's shards land on both servers'
/// bricks, nothing stays behind; environments that cannot serve files are refused before anything
/// is made (exit 2), with the reason; kill -9 in flight leaves servers the next start sweeps.
pub(crate) fn pfs_volume_across_two_instances_native_container_and_guest() -> Outcome {
    if let Some(why) = need_gluster() {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new().with_scratch();
    let scratch = fx.scratch();
    let out = fx.ok("run --env native:instances=2 --env \
         container:instances=2,capabilities=docker+SYS_ADMIN --workload \
         pfs:file_size=64MiB --reps 2 --warmup 0 --json");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        count_trials(&fx.db, "ok"),
        4,
        "not ok: {:#?}\n{}",
        trials_not_ok(&fx.db),
        String::from_utf8_lossy(&out.stderr)
    );
    let rows: Vec<&serde_json::Value> = doc["results"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["metric"] == "pfs_write" || r["metric"] == "pfs_read")
        .collect();
    assert_eq!(rows.len(), 4, "write and read for native and container: {rows:#?}");
    let mut line = Vec::new();
    for r in &rows {
        let mean = r["mean"].as_f64().unwrap();
        // A 64 MiB file through FUSE and TCP on one host: tens of MB/s at the very least (this
        // host: 300–700 MB/s); far below that the data did not go through the volume's path.
        assert!(mean > 20.0 && mean < 20_000.0, "{r}");
        line.push(format!("{} {} {:.0} MB/s", r["environment"].as_str().unwrap_or("?"), r["metric"], mean));
    }
    println!("    {}", line.join("; "));
    let raw = fx.export();
    for t in raw["trials"].as_array().unwrap() {
        let x = &t["extra"];
        assert_eq!(x["client"]["filesystem"], "fuse.glusterfs", "the client wrote through the mount: {x:#}");
        assert_eq!(x["volume"]["bricks"].as_array().map(Vec::len), Some(2), "{x:#}");
        // The client wrote once it was connected to both bricks (its `.meta` said so).
        assert_eq!(x["client"]["bricks_connected"]["bricks"], 2, "{x:#}");
        let bricks: Vec<u64> =
            x["servers"].as_array().unwrap().iter().map(|s| s["brick_bytes"].as_u64().unwrap()).collect();
        // 4 MiB shards of a 64 MiB file over two bricks: each holds some, together the file.
        assert!(
            bricks.len() == 2 && bricks.iter().all(|b| *b >= 4 << 20),
            "shards on both bricks: {bricks:?}"
        );
        assert!(bricks.iter().sum::<u64>() >= 64 << 20, "{bricks:?}");
    }
    fx.assert_no_leftovers();
    assert!(gluster_processes().is_empty(), "left running: {:?}", gluster_processes());

    // Refused before anything is made: where servers cannot run, and volumes their number cannot make.
    for (e, w, needle) in [
        ("container:instances=2", "pfs", "capabilities = \"docker,SYS_ADMIN\""),
        ("gvisor:instances=2", "pfs", "gVisor"),
        ("uml:instances=2,disk=ubd", "pfs", "does not run in UML"),
        ("qemu:instances=2", "pfs", "scratch disk"),
        ("native:instances=2", "pfs:volume=disperse", "3 servers at least"),
        ("native", "pfs:bricks=x:/y", "set by virtperf"),
    ] {
        let out = fx.vp(&format!("run --env {e} --workload {w}"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{e} {w}: {err}");
        assert!(err.contains(needle), "{e} {w}: {err}");
    }
    fx.assert_no_leftovers();

    // In QEMU guests: the image carries glusterd, its translators and their libraries.
    match need_qemu() {
        Some(why) => dropped("the volume in QEMU guests", &why),
        None => {
            let out = fx.ok("run --env qemu:instances=2,disk=virtio-blk --workload pfs:file_size=32MiB \
                 --reps 1 --warmup 0 --json");
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let w = doc["results"].as_array().unwrap().iter().find(|r| r["metric"] == "pfs_write").cloned();
            let Some(w) = w else {
                panic!("no pfs_write from the guests: {}", String::from_utf8_lossy(&out.stderr))
            };
            let raw = fx.export();
            let t = raw["trials"].as_array().unwrap().last().unwrap().clone();
            assert_eq!(t["status"], "ok", "{t:#}");
            assert_eq!(t["extra"]["client"]["bricks_connected"]["bricks"], 2, "{t:#}");
            let bricks: Vec<u64> = t["extra"]["servers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["brick_bytes"].as_u64().unwrap())
                .collect();
            assert!(
                bricks.len() == 2 && bricks.iter().all(|b| *b >= 4 << 20),
                "shards in both guests: {bricks:?}"
            );
            println!(
                "    qemu guests (TCG here): write {:.1} MB/s; bricks {bricks:?}; the client waited {} ms after the mount for both",
                w["mean"].as_f64().unwrap(),
                t["extra"]["client"]["bricks_connected"]["waited_ms"]
            );
            fx.assert_no_leftovers();
        }
    }

    // A brick daemon killed while the client writes fails that trial, with the reason; the next
    // trial makes its volume afresh and passes.
    let db2 = fx.path("dies.db");
    let child = vp_spawn(
        &[
            "run",
            "--env",
            "native:instances=2",
            "--workload",
            "pfs:file_size=2GiB,record_size=64KiB",
            "--reps",
            "2",
            "--warmup",
            "0",
            "--order",
            "sequential",
            "--db",
            db2.to_str().unwrap(),
        ],
        &fx.env(),
    );
    let brick = wait_for(
        || {
            let p = gluster_processes();
            (p.iter().filter(|c| c.contains("--brick-name")).count() == 2)
                .then(|| p.into_iter().find(|c| c.contains("--brick-name")))
                .flatten()
        },
        60.0,
    );
    assert!(brick.is_some(), "the servers never ran: {:?}", gluster_processes());
    // Let the client start writing, then kill one brick (listed again: a brick daemon forks away
    // from the process glusterd started, whose pid the first listing may have caught).
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let brick = gluster_processes().into_iter().find(|c| c.contains("--brick-name")).unwrap();
    let bpid: u32 = brick.split_whitespace().next().unwrap().parse().unwrap();
    kill(bpid, 9);
    let out = child.wait();
    let err = String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{err}");
    assert_eq!((count_trials(&db2, "failed"), count_trials(&db2, "ok")), (1, 1), "{err}");
    assert!(
        err.contains("brick daemon") || err.contains("not connected") || err.contains("Transport endpoint"),
        "the reason names the dead brick or the lost connection: {err}"
    );
    println!("    brick {bpid} killed mid-write: that trial failed with the reason, the next one passed");
    fx.assert_no_leftovers();
    assert!(gluster_processes().is_empty(), "left running: {:?}", gluster_processes());

    // kill -9 while the servers run: the next start stops them and removes their bricks.
    let child = fx.spawn(
        "run --env native:instances=2 --workload pfs:file_size=1GiB,record_size=64KiB --reps 3 --warmup 0",
    );
    let pid = child.id();
    let bricks = wait_for(
        || {
            let p = gluster_processes();
            (p.iter().filter(|c| c.contains("--brick-name")).count() == 2).then_some(p)
        },
        60.0,
    );
    kill(pid, 9);
    let _ = child.wait();
    let Some(running) = bricks else { panic!("the servers never ran: {:?}", gluster_processes()) };
    // The agents die with the run (or are the sweep's); the brick daemons, detached, stay.
    std::thread::sleep(std::time::Duration::from_millis(500));
    let stayed = gluster_processes();
    fx.ok("run --env native --workload noop --reps 1");
    let gone = wait_for(|| gluster_processes().is_empty().then_some(()), 5.0);
    assert!(gone.is_some(), "not swept: {:?}", gluster_processes());
    println!(
        "    kill -9 with {} GlusterFS processes running ({} still there after it): swept",
        running.len(),
        stayed.len()
    );
    fx.assert_no_leftovers();
    let left: Vec<_> =
        std::fs::read_dir(&scratch).into_iter().flatten().flatten().map(|e| e.path()).collect();
    assert!(left.is_empty(), "scratch left: {left:?}");
    Outcome::Pass
}
