//! e2e: the host's boundary (docs/security.md): what a workload inside an environment writes
//! never decides what the host kills, deletes or runs, and the host's file systems stay
//! read-only to every environment.

use crate::util::*;

/// A process of the host's that is none of virtperf's, in a mount namespace of its own (as a
/// service with private mounts, another container): `unshare -m sleep 600`, ended by the test by
/// its pid.
struct Bystander(Option<Spawned>);

impl Bystander {
    fn start() -> Bystander {
        let child = std::process::Command::new("unshare")
            .args(["-m", "sleep", "600"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("unshare starts");
        let b = Bystander(Some(Spawned::new(child, "unshare -m sleep 600")));
        // unshare execs sleep once the namespace is made: its inode differs from ours then.
        let own = mntns(std::process::id());
        wait_for(|| (mntns(b.pid()).is_some() && mntns(b.pid()) != own).then_some(()), 5.0)
            .expect("the bystander entered its own mount namespace");
        b
    }
    fn pid(&self) -> u32 {
        self.0.as_ref().map_or(0, Spawned::id)
    }
    fn alive(&self) -> bool {
        std::fs::read_to_string(format!("/proc/{}/stat", self.pid()))
            .ok()
            .and_then(|s| s.rsplit_once(')').map(|(_, r)| r.trim_start().to_string()))
            .is_some_and(|r| !r.starts_with('Z'))
    }
    fn mntns(&self) -> u64 {
        mntns(self.pid()).expect("the bystander's namespace")
    }
}

impl Drop for Bystander {
    fn drop(&mut self) {
        kill(self.pid(), 9);
        if let Some(s) = self.0.take() {
            let _ = s.wait();
        }
    }
}

fn mntns(pid: u32) -> Option<u64> {
    let t = std::fs::read_link(format!("/proc/{pid}/ns/mnt")).ok()?;
    t.to_string_lossy().strip_prefix("mnt:[")?.strip_suffix(']')?.parse().ok()
}

/// A container's workload names a bystander's mount namespace where a pfs server records its own
/// (`/scratch/pfs/mntns`): neither the instance's teardown nor, after a kill -9 of the run, the
/// next start's sweep kills it. Before the fix both did (the sweep trusted that file).
pub(crate) fn a_containers_scratch_cannot_name_a_host_process_to_kill() -> Outcome {
    if let Some(why) = need_root_and_env("container").or_else(|| need_tool("unshare")) {
        return Outcome::Skip(why);
    }
    let fx = Fixture::new().with_scratch();
    let victim = Bystander::start();
    let plant = |then: &str| {
        format!(
            "sh -c 'mkdir -p /scratch/pfs && echo {} > /scratch/pfs/mntns && cat /scratch/pfs/mntns{then}'",
            victim.mntns()
        )
    };
    // A disk case gives the container its /scratch (a host directory, bound read-write).
    let exp = |name: &str, cmd: &str| {
        format!(
            "name = \"{name}\"\nreps = 1\nwarmup = 0\ntimeout = \"120s\"\n[[env]]\nkind = \"container\"\n\
             [[workload]]\nkind = \"disk\"\nfile_size = \"1MiB\"\nrecord_size = \"64KiB\"\nmodes = \"write\"\n\
             [[workload]]\nkind = \"command\"\ncmd = \"{}\"\n",
            cmd.replace('\\', "\\\\").replace('"', "\\\"")
        )
    };
    // 1. The instance's own teardown.
    let file = fx.file("teardown.toml", &exp("teardown", &plant("")));
    let doc = fx.json_on("teardown.db", &format!("run {}", file.display()));
    assert_eq!(doc["trials"]["ok"], 2, "both cases ran: {doc:#}");
    assert!(victim.alive(), "the container's teardown killed a process it named");
    fx.assert_no_leftovers();
    // 2. kill -9 of the run while the file is there: the next start's sweep.
    let file = fx.file("sweep.toml", &exp("sweep", &plant(" && sleep 60")));
    let child = fx.spawn(&format!("run {}", file.display()));
    let planted = wait_for(
        || {
            let found = std::fs::read_dir(fx.scratch())
                .into_iter()
                .flatten()
                .flatten()
                .flat_map(|run| std::fs::read_dir(run.path()).into_iter().flatten().flatten())
                .any(|inst| inst.path().join("pfs/mntns").is_file());
            found.then_some(())
        },
        60.0,
    );
    kill(child.id(), 9);
    let _ = child.wait();
    assert!(planted.is_some(), "the workload never wrote its file");
    fx.ok("run --env native --workload noop --reps 1");
    fx.assert_no_leftovers();
    assert!(victim.alive(), "the next start's sweep killed a process a container named");
    println!("    a bystander named by a container's /scratch/pfs/mntns survived the teardown and the sweep");
    Outcome::Pass
}

/// A UML guest remounts its root read-write and writes the host's /opt, the state directory
/// (where the ledgers are, whose entries the next sweep undoes) and the run's own directory:
/// every write fails, nothing appears on the host. Before the fix the file appeared in /opt,
/// owned by root.
pub(crate) fn a_uml_guest_cannot_write_the_hosts_root() -> Outcome {
    if let Some(why) = need_root_and_env("uml") {
        return Outcome::Skip(why);
    }
    // Beside the agent's binary, which the guest's init never covers with its tmpfs (it takes
    // /tmp, or /var/tmp where the checkout is below /tmp): the guest must see what it tries to
    // write (it says so), or a failed write proves nothing.
    let beside = std::path::Path::new(exe()).parent().and_then(|p| p.parent()).expect("the target directory");
    let outside = tempfile::Builder::new().prefix("vp-e2e-").tempdir_in(beside).unwrap();
    let fx = Fixture::new().with_state_dir(&outside.path().join("state"));
    let tag = format!("vp-breach-{}", std::process::id());
    let targets = [
        std::path::PathBuf::from("/opt").join(&tag),
        fx.state.join(&tag),
        outside.path().join(&tag),
        std::path::PathBuf::from("/run").join(&tag),
    ];
    let tries: String = targets
        .iter()
        .map(|t| format!("touch {t} 2>/dev/null && echo WROTE:{t}; ", t = t.display()))
        .collect();
    // Every ledger of the state directory, appended to (the sweep would run what it holds).
    let script = format!(
        "mount -o remount,rw / 2>&1; test -d {state} && echo SEES-STATE; {tries}for l in {state}/ledger-*.json; do test -f $l && echo SEES-LEDGER; echo x >> $l 2>/dev/null && echo WROTE:$l; done; echo done",
        state = fx.state.display()
    );
    let exp = format!(
        "name = \"uml-root\"\nreps = 1\nwarmup = 0\n[[env]]\nkind = \"uml\"\n[[workload]]\nkind = \"command\"\ncmd = \"sh -c '{}'\"\n",
        script.replace('"', "\\\"")
    );
    let file = fx.file("uml.toml", &exp);
    let doc = fx.json(&format!("run {}", file.display()));
    let trials = fx.export();
    // What the script printed (its own text, in the parameters, names every target too).
    let out: String = trials["trials"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t["extra"]["tool"]["stdout"].as_str())
        .collect();
    for t in &targets {
        let planted = t.exists();
        let _ = std::fs::remove_file(t);
        assert!(!planted, "the guest wrote {} on the host", t.display());
    }
    assert!(!out.contains("WROTE:"), "a write succeeded: {out}");
    assert_eq!(doc["trials"]["ok"], 1, "the guest ran its script to the end: {doc:#}");
    assert!(out.contains("done"), "the script's output was recorded: {out}");
    assert!(
        out.contains("SEES-STATE") && out.contains("SEES-LEDGER"),
        "the guest saw what it tried to write: {out}"
    );
    fx.assert_no_leftovers();
    println!("    a UML guest's remount rw and writes to /opt, /run, the state directory and its ledgers all failed");
    Outcome::Pass
}
