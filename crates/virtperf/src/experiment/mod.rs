//! Experiments: environments × workloads × parameters × repetitions.
//!
//! Two front ends, one validator: a TOML file (`examples/*.toml`) and `--env/--workload` flags.
//! Both are read into [`RawItem`]s that remember where each value came from ([`Origin`]), then
//! checked against the parameter schemas of each environment and workload kind. Every error names
//! the file and line (or the flag) and the key, and says what is expected. Nothing is created
//! before an experiment passes.

mod file;
mod flags;
mod model;
mod validate;

pub use file::*;
pub use flags::*;
pub use model::*;
pub use validate::*;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::env;
    use serde_json::Value;
    use virtperf_workload::params::parse_rate_bps;
    use virtperf_workload::Raw;

    /// Experiment files and flags come from users: whatever they hold, the parser answers with an
    /// experiment or an error that names where, never a panic (and never an exploding sweep).
    #[test]
    fn fuzz_experiment_files_and_flags() {
        use proptest::prelude::*;
        use virtperf_proto::fuzzing::{fuzz, mutated, with_corpus};
        let seeds: Vec<Vec<u8>> = [
            GOOD,
            include_str!("../../../../examples/default.toml"),
            include_str!("../../../../examples/all-pairs.toml"),
            include_str!("../../../../examples/seed000-exp1-load.toml"),
            include_str!("../../../../examples/seed003-kvm-nics.toml"),
            include_str!("../../../../examples/rfc2544-kvm-seed.toml"),
        ]
        .iter()
        .map(|t| t.as_bytes().to_vec())
        .collect();
        const TOKENS: &[&str] = &[
            "\n",
            "=",
            "[",
            "]",
            "[[env]]\n",
            "[[workload]]\n",
            "[lab]\n",
            "\"",
            ",",
            "kind = ",
            "reps = ",
            "-1",
            "0",
            "99999999999999999999",
            "1e309",
            "\"10MiB\"",
            "\"1ms\"",
            "[1,2,3,4,5,6,7,8]",
            "true",
            "{",
            "}",
            "#",
            "\u{0}",
            "é",
            "name = \"x\"\n",
        ];
        fuzz("experiment toml", mutated(with_corpus("experiment toml", seeds), TOKENS), |bytes| {
            let text = String::from_utf8_lossy(&bytes);
            match read_toml("x.toml", &text).and_then(|raw| validate(&raw, &Origin::Default)) {
                Ok(e) => {
                    prop_assert!(!e.envs.is_empty() && !e.cases.is_empty());
                    prop_assert!(bounded(&e), "an exploding sweep was accepted: {} cases", e.cases.len());
                }
                Err(e) => prop_assert!(!e.to_string().is_empty()),
            }
            Ok(())
        });
        let flags =
            prop_oneof!["[a-z_]{0,10}(:[a-z_]{0,8}=[a-zA-Z0-9\\[\\],.]{0,12}){0,4}", any::<String>(),];
        fuzz("experiment flags", (flags.clone(), flags), |(env, workload)| {
            let (Ok(e), Ok(w)) = (read_flag("--env", &env), read_flag("--workload", &workload)) else {
                return Ok(());
            };
            let raw = RawExperiment { envs: vec![e], workloads: vec![w], ..Default::default() };
            match validate(&raw, &Origin::Default) {
                Ok(e) => {
                    prop_assert!(bounded(&e), "an exploding sweep was accepted: {} cases", e.cases.len())
                }
                Err(err) => prop_assert!(!err.to_string().is_empty()),
            }
            let _ = read_lab_flag(&env);
            Ok(())
        });
    }

    /// Every example validates under every host profile this project runs on, whatever machine
    /// runs the suite; sizes derived from a profile fit every environment, and a clamp says why.
    #[test]
    fn every_example_validates_under_every_host_profile() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples");
        let mut examples: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        examples.sort();
        assert!(examples.len() >= 10, "{examples:?}");
        for (profile, facts) in crate::host::facts::profiles() {
            for path in &examples {
                let text = std::fs::read_to_string(path).unwrap();
                let name = path.file_name().unwrap().to_string_lossy().to_string();
                let exp = read_toml(&name, &text)
                    .and_then(|raw| validate_on(&raw, &Origin::Default, &facts))
                    .unwrap_or_else(|e| panic!("{name} under {profile}: {e}"));
                for z in &exp.sizings {
                    // A scratch disk given by default sizes an environment, named in `case`.
                    if let Some(e) = exp.envs.iter().find(|e| e.name == z.case && z.key == "disk") {
                        assert_eq!(
                            e.params.get("disk"),
                            Some(&z.used),
                            "{name}: the guest gets the disk said"
                        );
                        continue;
                    }
                    let c = exp.cases.iter().find(|c| c.label == z.case);
                    let c =
                        c.unwrap_or_else(|| panic!("{name}: sizing of no case or environment: {}", z.line()));
                    assert_eq!(c.params.get(&z.key), Some(&z.used), "{name}: the case runs the size used");
                    for e in &exp.envs {
                        if let Some((_, has)) = env::find(&e.kind).and_then(|k| k.memory_bytes(&e.params)) {
                            assert!(
                                z.bytes_used * 4 <= has * 3,
                                "{name} under {profile}: {} in {}",
                                z.line(),
                                e.name
                            );
                        }
                    }
                    assert_eq!(z.limit.is_some(), z.bytes_used < z.bytes_derived, "{}", z.line());
                }
                if name == "memory.toml" {
                    let z = exp
                        .sizings
                        .iter()
                        .find(|z| z.case == "stream")
                        .expect("stream is sized from the host");
                    match profile {
                        // 4 × 32 MiB per array: 384 MiB, within uml's 3/4 × 640 MiB.
                        "amd-epyc" => {
                            assert_eq!((z.bytes_used, z.limit.is_none()), (384 << 20, true), "{}", z.line())
                        }
                        // 4 × 35.75 MiB per array: 429 MiB, within uml's 3/4 × 640 MiB.
                        "intel-xeon-cascadelake" => {
                            assert_eq!((z.bytes_used, z.limit.is_none()), (449_839_104, true), "{}", z.line())
                        }
                        // 4 × 260 MiB per array would be 3120 MiB: clamped to 3 × 160 MiB.
                        "intel-xeon" => {
                            assert_eq!(
                                (z.bytes_derived, z.bytes_used),
                                (3120 << 20, 480 << 20),
                                "{}",
                                z.line()
                            );
                            let l = z.line();
                            assert!(l.contains("instead of") && l.contains("`uml` has mem = 640 MiB"), "{l}");
                        }
                        // 4 × 480 MiB per array would be 5760 MiB: clamped to 3 × 160 MiB as well.
                        "intel-xeon-amx" => {
                            assert_eq!(
                                (z.bytes_derived, z.bytes_used),
                                (5760 << 20, 480 << 20),
                                "{}",
                                z.line()
                            );
                        }
                        other => panic!("no expectation for profile {other}"),
                    }
                }
            }
        }
    }

    #[test]
    fn a_size_given_by_the_user_is_never_clamped_but_refused_when_it_does_not_fit() {
        let intel = crate::host::facts::profiles().into_iter().find(|p| p.0 == "intel-xeon").unwrap().1;
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "native").unwrap());
        raw.envs.push(read_flag("--env", "uml:mem=640MiB").unwrap());
        raw.workloads.push(read_flag("--workload", "stream:elements=136314880").unwrap());
        let e = validate_on(&raw, &Origin::Default, &intel).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("mem"), "{e}");
        assert!(e.message.contains("3120 MiB"), "{e}");
        // Natively only: the host holds it, nothing to clamp.
        raw.envs.pop();
        let x = validate_on(&raw, &Origin::Default, &intel).unwrap();
        assert!(x.sizings.is_empty(), "given, not sized: {:?}", x.sizings);
        // Left out: sized from the 260 MiB cache, held by this host's 3/4 of 23.5 GiB.
        raw.workloads[0] = read_flag("--workload", "stream").unwrap();
        let x = validate_on(&raw, &Origin::Default, &intel).unwrap();
        assert_eq!((x.sizings[0].bytes_used, x.sizings[0].limit.as_deref()), (3120 << 20, None));
    }

    #[test]
    fn instances_sweep_into_environments_and_bad_counts_are_refused() {
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "native:instances=[1,2,4]").unwrap());
        raw.envs.push(read_flag("--env", "container:cpus=1,instances=2").unwrap());
        raw.workloads.push(read_flag("--workload", "intmix").unwrap());
        let e = validate(&raw, &Origin::Default).unwrap();
        let names: Vec<(&str, u32, &str)> =
            e.envs.iter().map(|x| (x.name.as_str(), x.instances, x.group.as_str())).collect();
        assert_eq!(
            names,
            [
                ("native [instances=1]", 1, "native"),
                ("native [instances=2]", 2, "native"),
                ("native [instances=4]", 4, "native"),
                ("container:cpus=1", 2, "container:cpus=1")
            ]
        );
        assert!(e.to_toml().contains("instances = 4"));
        for bad in ["native:instances=0", "native:instances=65", "native:instances=two"] {
            let mut raw = RawExperiment::default();
            raw.envs.push(read_flag("--env", bad).unwrap());
            raw.workloads.push(read_flag("--workload", "noop").unwrap());
            let err = validate(&raw, &Origin::Default).unwrap_err();
            assert_eq!(err.key.as_deref(), Some("instances"), "{bad}: {err}");
        }
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "native:instances=2").unwrap());
        raw.envs.push(read_flag("--env", "container").unwrap());
        raw.workloads.push(read_flag("--workload", "tcp_rr:pairs=all").unwrap());
        let err = validate(&raw, &Origin::Default).unwrap_err();
        assert!(err.key.as_deref() == Some("instances") && err.to_string().contains("pairs"), "{err}");
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "qemu:memory=4GiB,instances=64").unwrap());
        raw.workloads.push(read_flag("--workload", "noop").unwrap());
        let err = validate(&raw, &Origin::Default).unwrap_err();
        assert!(err.key.as_deref() == Some("instances") && err.to_string().contains("80 %"), "{err}");
    }

    #[test]
    fn instances_start_together_or_one_by_one() {
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "container:instances=[1,4],start=together").unwrap());
        raw.envs.push(read_flag("--env", "native:instances=2").unwrap());
        raw.workloads.push(read_flag("--workload", "noop").unwrap());
        let e = validate(&raw, &Origin::Default).unwrap();
        let got: Vec<(&str, u32, bool)> =
            e.envs.iter().map(|x| (x.name.as_str(), x.instances, x.together)).collect();
        assert_eq!(
            got,
            [
                ("container [instances=1]", 1, true),
                ("container [instances=4]", 4, true),
                ("native", 2, false)
            ]
        );
        // Written back, it reads the same.
        let text = e.to_toml();
        assert!(text.contains("start = \"together\""), "{text}");
        let back = parse(&text).unwrap();
        let again: Vec<(&str, u32, bool)> =
            back.envs.iter().map(|x| (x.name.as_str(), x.instances, x.together)).collect();
        assert_eq!(again, got);
        for bad in ["native:instances=2,start=fast", "native:instances=2,start=[together,together]"] {
            let mut raw = RawExperiment::default();
            raw.envs.push(read_flag("--env", bad).unwrap());
            raw.workloads.push(read_flag("--workload", "noop").unwrap());
            let err = validate(&raw, &Origin::Default).unwrap_err();
            assert_eq!(err.key.as_deref(), Some("start"), "{bad}: {err}");
            assert!(err.to_string().contains("\"together\""), "{err}");
        }
    }

    /// No exploding sweep: at most [`MAX_CASES`] cases per workload, and a plan of at most
    /// [`MAX_TRIALS`] trials.
    fn bounded(e: &Experiment) -> bool {
        let trials = (e.envs.len() as u64)
            .saturating_mul(e.cases.len() as u64)
            .saturating_mul(u64::from(e.reps + e.warmup))
            .saturating_mul(u64::from(e.launches));
        e.cases.len() <= MAX_CASES * e.workloads.len().max(1) && trials <= MAX_TRIALS
    }

    #[test]
    fn exploding_sweeps_and_plans_are_refused() {
        let many: String = (16..117).map(|i| i.to_string()).collect::<Vec<_>>().join(",");
        let text = format!(
            "[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"pde\"\nn = [{many}]\niterations = [1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,29,30,31,32,33,34,35,36,37,38,39,40,41,42,43,44,45,46,47,48,49,50,51,52,53,54,55,56,57,58,59,60,61,62,63,64,65,66,67,68,69,70,71,72,73,74,75,76,77,78,79,80,81,82,83,84,85,86,87,88,89,90,91,92,93,94,95,96,97,98,99,100]\n"
        );
        let e = parse(&text).unwrap_err().to_string();
        assert!(e.contains("combinations") && e.contains("10000"), "{e}");
        let e = parse("reps = 10000000\n[[env]]\nkind = \"native\"\n[[env]]\nkind = \"native\"\nname = \"b\"\n[[workload]]\nkind = \"noop\"\n").unwrap_err().to_string();
        assert!(e.contains("trials, more than") && e.contains("reps"), "{e}");
    }

    /// A workload's file on the host (fio's job file) is read when the experiment is validated,
    /// asked of the workload (`read_host_files`): its text travels with the case; a missing or
    /// wrong file is an error at the `job` key, from the line that gave it.
    #[test]
    fn a_workloads_host_file_is_read_at_validation_and_errors_name_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let job = dir.path().join("j.fio");
        std::fs::write(&job, "[seq]\nrw=read\nsize=1m\n").unwrap();
        let fio = |path: &std::path::Path| {
            format!(
                "[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"fio\"\njob = \"{}\"\n",
                path.display()
            )
        };
        let e = parse(&fio(&job)).unwrap();
        assert_eq!(e.cases[0].params["job_text"], "[seq]\nrw=read\nsize=1m\n");
        let err = parse(&fio(&dir.path().join("missing.fio"))).unwrap_err();
        assert_eq!(err.key.as_deref(), Some("job"), "{err}");
        assert!(err.message.contains("cannot read the fio job file"), "{err}");
        let not_a_job = dir.path().join("x.txt");
        std::fs::write(&not_a_job, "rw=read\n").unwrap();
        let err = parse(&fio(&not_a_job)).unwrap_err();
        assert_eq!(err.key.as_deref(), Some("job"), "{err}");
        assert!(err.message.contains("no [job] section"), "{err}");
    }

    fn parse(text: &str) -> Result<Experiment, InputError> {
        let raw = read_toml("x.toml", text)?;
        validate(&raw, &Origin::File { path: "x.toml".into(), line: 1 })
    }

    const GOOD: &str = r#"
name = "avionics"
reps = 1000
warmup = 2
seed = 7
timeout = "30s"

[[env]]
kind = "native"

[[env]]
kind = "container"
name = "box"
cpus = 1

[[workload]]
kind = "memcpy"
size = "10MiB"
copies = 10

[[workload]]
kind = "pde"
n = [64, 128]
iterations = [10, 20]
"#;

    #[test]
    fn good_file_parses_and_sweeps() {
        let e = parse(GOOD).unwrap();
        assert_eq!((e.reps, e.warmup, e.seed, e.timeout_ms), (1000, 2, 7, 30_000));
        assert_eq!(e.envs[1].name, "box");
        assert_eq!(e.envs[0].name, "native");
        assert_eq!(e.cases.len(), 5);
        assert_eq!(e.cases[0].label, "memcpy");
        assert_eq!(e.cases[1].label, "pde [n=64,iterations=10]");
        assert_eq!(e.cases[0].params["size"], Value::from(10u64 << 20));
    }

    fn flag_exp(workload: &str, lab: Option<&str>) -> Result<Experiment, InputError> {
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "native").unwrap());
        raw.workloads.push(read_flag("--workload", workload).unwrap());
        if let Some(l) = lab {
            for (k, v) in read_lab_flag(l).unwrap() {
                raw.settings.insert(k, v);
            }
        }
        validate(&raw, &Origin::Default)
    }

    #[test]
    fn rfc2544_sweeps_every_frame_size_and_both_directions_once() {
        let e = flag_exp("rfc2544:quick=true", None).unwrap();
        assert_eq!(e.cases.len(), 14);
        assert_eq!(e.cases[0].label, "rfc2544:quick=true [frame_size=64,direction=in]");
        assert_eq!(e.cases[13].params["frame_size"], Value::from(1518));
        assert_eq!(e.cases[13].params["direction"], Value::from("out"));
        // A procedure is many trials: one repetition, no warm-up, unless asked.
        assert_eq!((e.reps, e.warmup), (1, 0));
        // `tests` is a set, not a sweep; `frame_sizes` names `frame_size`.
        let e = flag_exp("rfc2544:tests=[latency,throughput],frame_sizes=[64,128],direction=reflect", None)
            .unwrap();
        assert_eq!(e.cases.len(), 2);
        assert_eq!(e.cases[0].params["tests"], Value::from("latency,throughput"));
        // Mixed with another workload, the usual repetitions apply.
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "native").unwrap());
        raw.workloads.push(read_flag("--workload", "rfc2544:frame_size=64,direction=in").unwrap());
        raw.workloads.push(read_flag("--workload", "tcp_stream").unwrap());
        assert_eq!(validate(&raw, &Origin::Default).unwrap().reps, 10);
    }

    #[test]
    fn rfc2544_bad_input_names_the_key() {
        let key = |w: &str, lab: Option<&str>| flag_exp(w, lab).unwrap_err().key;
        assert_eq!(key("rfc2544:frame_size=63", None).as_deref(), Some("frame_size"));
        assert_eq!(key("rfc2544:frame_size=1519", None).as_deref(), Some("frame_size"));
        assert_eq!(key("rfc2544:frame_size=9000,jumbo=true", None).as_deref(), Some("frame_size"));
        assert!(flag_exp("rfc2544:frame_size=9000,jumbo=true", Some("mtu=9000")).is_ok());
        assert_eq!(key("rfc2544:resolution=0", None).as_deref(), Some("resolution"));
        assert_eq!(key("rfc2544:resolution=-1", None).as_deref(), Some("resolution"));
        assert_eq!(key("rfc2544:trial_duration=0s", None).as_deref(), Some("trial_duration"));
        assert_eq!(key("rfc2544:line_rate=0", None).as_deref(), Some("line_rate"));
        assert_eq!(key("rfc2544:line_rate=-1Gbit", None).as_deref(), Some("line_rate"));
        assert_eq!(key("rfc2544:tests=jitter", None).as_deref(), Some("tests"));
        assert_eq!(key("rfc2544:direction=both", None).as_deref(), Some("direction"));
        assert_eq!(key("rfc2544:frame_size=64,frame_sizes=128", None).as_deref(), Some("frame_size"));
        assert_eq!(key("frames:rate=-5", None).as_deref(), Some("rate"));
        let e = flag_exp("rfc2544:frame_size=1518", Some("mtu=1000")).unwrap_err();
        assert!(e.to_string().contains("MTU of 1000"), "{e}");
    }

    #[test]
    fn rendered_toml_round_trips() {
        let e = parse(GOOD).unwrap();
        let again = parse(&e.to_toml()).unwrap();
        assert_eq!(e, again);
    }

    #[test]
    fn explain_adds_the_mechanism_cases_it_lacks_once() {
        let text = "explain = true\n[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"syscall\"\niterations = 10\n[[workload]]\nkind = \"memcpy\"\n";
        let e = parse(text).unwrap();
        assert!(e.explain);
        let kinds: Vec<&str> = e.cases.iter().map(|c| c.kind.as_str()).collect();
        // The given syscall case stands for its mechanism; every other one is added after.
        assert_eq!(kinds.iter().filter(|k| **k == "syscall").count(), 1, "{kinds:?}");
        // Every mechanism but the packets' (no network workload here: nothing sends one).
        for m in virtperf_record::mechanisms::MECHANISMS {
            assert_eq!(kinds.contains(&m.kind), !validate::priced_by_a_flow(&m), "{} in {kinds:?}", m.kind);
        }
        assert_eq!(&kinds[..2], &["syscall", "memcpy"]);
        // A network workload brings the packets' price (a udp_rr case) along.
        let net = parse(&format!("{text}[[workload]]\nkind = \"tcp_rr\"\n")).unwrap();
        assert!(net.cases.iter().any(|c| c.kind == "udp_rr"), "{:?}", net.cases);
        // Its flows as long as the shortest the experiment's network workloads have.
        let net = parse(&format!(
            "{text}[[workload]]\nkind = \"tcp_rr\"\nduration = \"2s\"\n[[workload]]\nkind = \"udp_stream\"\nframe_size = 64\nduration = \"500ms\"\n"
        ))
        .unwrap();
        let rr = net.cases.iter().find(|c| c.kind == "udp_rr").unwrap();
        assert_eq!(rr.params.get("duration"), Some(&serde_json::json!(500)), "{:?}", rr.params);
        // A stream's packets are priced by an MTU-sized udp_stream, added beside the 64-byte
        // stream the experiment explains (that one is a workload, not the price).
        let streams: Vec<_> = net.cases.iter().filter(|c| c.kind == "udp_stream").collect();
        assert_eq!(streams.len(), 2, "{:?}", net.cases);
        let mtu = streams.iter().find(|c| c.label == "udp_mtu").unwrap();
        assert_eq!(
            (mtu.params.get("frame_size"), mtu.params.get("direction"), mtu.params.get("duration")),
            (Some(&serde_json::json!(1518)), Some(&serde_json::json!("out")), Some(&serde_json::json!(500))),
            "{:?}",
            mtu.params
        );
        // A udp_stream at its default frame size (1518) is the price itself: none added; a
        // sweep holding 1518 holds it too.
        for given in ["", "frame_size = [64, 1518]\n"] {
            let own = parse(&format!("{text}[[workload]]\nkind = \"udp_stream\"\n{given}")).unwrap();
            let n = own.cases.iter().filter(|c| c.kind == "udp_stream").count();
            assert_eq!(n, if given.is_empty() { 1 } else { 2 }, "{given}: {:?}", own.cases);
            assert!(own.cases.iter().all(|c| c.label != "udp_mtu"), "{given}");
        }
        // Rendered and read again: the same cases, none added twice.
        assert_eq!(parse(&e.to_toml()).unwrap(), e);
        // Counting happens on the warm-up: none is refused, naming the key.
        expect_err(&format!("warmup = 0\n{text}"), 1, Some("warmup"), "explain = true counts");
        expect_err(
            "explain = \"yes\"\n[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"cpu\"\n",
            1,
            Some("explain"),
            "true or false",
        );
    }

    fn expect_err(text: &str, line: usize, key: Option<&str>, needle: &str) {
        let e = parse(text).unwrap_err();
        assert_eq!(e.origin, Origin::File { path: "x.toml".into(), line }, "{e}");
        assert_eq!(e.key.as_deref(), key, "{e}");
        assert!(e.to_string().contains(needle), "`{e}` should mention `{needle}`");
    }

    #[test]
    fn bad_files_name_line_and_key() {
        let base = "[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"cpu\"\n";
        expect_err("reps = 0\n", 1, Some("reps"), "from 1");
        expect_err("reps = \"ten\"\n", 1, Some("reps"), "integer");
        expect_err(&format!("{base}reps = = 3\n"), 5, None, "syntax");
        expect_err(&format!("reps = 3\ncolour = 1\n{base}"), 2, Some("colour"), "unknown key");
        expect_err(
            "[[env]]\nkind = \"xen9\"\n[[workload]]\nkind = \"cpu\"\n",
            1,
            Some("kind"),
            "known: native",
        );
        expect_err(
            "[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"memcpy\"\nsize = \"-1MiB\"\n",
            5,
            Some("size"),
            "expected a size",
        );
        expect_err(
            "[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"memcpy\"\nsize = -3\n",
            5,
            Some("size"),
            "expected a size",
        );
        expect_err(
            "[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"memcpy\"\nbogus = 3\n",
            5,
            Some("bogus"),
            "known keys: size, copies",
        );
        expect_err(
            "[[env]]\nkind = \"native\"\n[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"cpu\"\n",
            3,
            Some("name"),
            "distinct",
        );
        expect_err("[[env]]\nkind = \"native\"\n", 1, Some("workload"), "no workload");
        expect_err("[[env]]\nname = \"x\"\n[[workload]]\nkind = \"cpu\"\n", 1, Some("kind"), "needs `kind");
        expect_err(
            &format!("order = \"backwards\"\n{base}"),
            1,
            Some("order"),
            "paired, random, interleaved",
        );
        expect_err(&format!("timeout = \"soon\"\n{base}"), 1, Some("timeout"), "duration");
        expect_err(
            "[[env]]\nkind = \"container\"\ncpus = [1, 2]\n[[workload]]\nkind = \"cpu\"\n",
            3,
            Some("cpus"),
            "cannot be swept",
        );
        expect_err(
            "[[env]]\nkind = \"container\"\ncpus = 0\n[[workload]]\nkind = \"cpu\"\n",
            3,
            Some("cpus"),
            "expected",
        );
    }

    #[test]
    fn flags_parse_like_files() {
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "native").unwrap());
        raw.envs.push(read_flag("--env", "container:cpus=1,name=c1").unwrap());
        raw.workloads.push(read_flag("--workload", "memcpy:size=10MiB,copies=10").unwrap());
        raw.workloads.push(read_flag("--workload", "pde:n=[32,64]").unwrap());
        let e = validate(&raw, &Origin::Default).unwrap();
        assert_eq!(e.envs[1].name, "c1");
        assert_eq!(e.cases.len(), 3);
        assert_eq!(e.cases[0].label, "memcpy:size=10MiB,copies=10");
        assert_eq!(e.cases[2].label, "pde:n=[32,64] [n=64]");
        assert_eq!(parse(&e.to_toml()).unwrap().cases, e.cases);
    }

    #[test]
    fn bad_flags_name_flag_and_key() {
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "native").unwrap());
        raw.workloads.push(read_flag("--workload", "memcpy:size=-1").unwrap());
        let e = validate(&raw, &Origin::Default).unwrap_err();
        assert_eq!(e.to_string(), "--workload memcpy:size=-1: key `size`: got `-1`, expected a size from 1 to 17179869184 bytes, e.g. 4KiB, 10MiB, 1GiB");
        assert!(read_flag("--workload", "memcpy:size").is_err());
        assert!(read_flag("--workload", ":x=1").is_err());
    }

    #[test]
    fn rates_and_delays() {
        assert_eq!(parse_rate_bps(&Raw::Str("1gbit".into())), Some(1_000_000_000));
        assert_eq!(parse_rate_bps(&Raw::Str("100Mbit/s".into())), Some(100_000_000));
        assert_eq!(parse_rate_bps(&Raw::Str("2.5gbps".into())), Some(2_500_000_000));
        assert_eq!(parse_rate_bps(&Raw::Int(9600)), Some(9600));
        for bad in ["-5mbit", "0", "fast", ""] {
            assert_eq!(parse_rate_bps(&Raw::Str(bad.into())), None, "{bad}");
        }
        assert_eq!(parse_rate_bps(&Raw::Int(-1)), None);
        assert_eq!(parse_delay_us(&Raw::Str("1.5ms".into())), Some(1500));
        assert_eq!(parse_delay_us(&Raw::Str("100us".into())), Some(100));
        assert_eq!(parse_delay_us(&Raw::Int(0)), Some(0));
        assert_eq!(parse_delay_us(&Raw::Str("-1ms".into())), None);
    }

    #[test]
    fn lab_table_and_load_keys_round_trip() {
        let text = r#"
[lab]
mtu = 9000
rate = "1gbit"
loss = 0.5

[[env]]
kind = "native"

[[workload]]
kind = "tcp_stream"
load = {percent = [0, 90], on = "tester", cpus = 1}
"#;
        let e = parse(text).unwrap();
        assert_eq!((e.lab.mtu, e.lab.rate_bps, e.lab.loss_pct), (9000, Some(1_000_000_000), 0.5));
        assert_eq!(e.cases.len(), 2);
        assert_eq!(e.cases[0].load, None, "0 % is no load");
        assert_eq!(e.cases[1].load, Some(LoadSpec { percent: 90.0, on: LoadOn::Tester, cpus: 1 }));
        assert!(e.cases.iter().all(|c| c.network && !c.params.contains_key("load")));
        let again = parse(&e.to_toml()).unwrap();
        assert_eq!((again.lab, again.cases), (e.lab, e.cases));
        expect_err(
            "[lab]\nmtu = 60\n[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"cpu\"\n",
            2,
            Some("lab.mtu"),
            "68",
        );
        expect_err(
            "[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"cpu\"\nload = {percent = 50, where = 1}\n",
            5,
            Some("load.where"),
            "unknown key",
        );
    }
}

#[cfg(test)]
mod host_tests {
    use super::*;

    fn parse(text: &str) -> Result<Experiment, InputError> {
        validate(&read_toml("h.toml", text)?, &Origin::Default)
    }

    const W: &str = "[[workload]]\nkind = \"memcpy\"\n";

    #[test]
    fn hosts_are_declared_named_and_rendered_back() {
        let text = format!(
            "[[host]]\nname = \"b\"\nssh = \"root@198.18.7.2\"\n\n[[env]]\nkind = \"native\"\nname = \"n@b\"\nhost = \"b\"\n\n[[env]]\nkind = \"native\"\nhost = \"local\"\n{W}"
        );
        let e = parse(&text).unwrap();
        assert_eq!(
            e.hosts,
            vec![HostDef {
                name: "b".into(),
                ssh: "root@198.18.7.2".into(),
                ssh_config: None,
                addr: None,
                local_addr: None
            }]
        );
        assert_eq!(e.envs[0].host.as_deref(), Some("b"));
        assert_eq!(e.envs[1].host, None, "local is this machine");
        let again = parse(&e.to_toml()).unwrap();
        assert_eq!(again.hosts, e.hosts);
        assert_eq!(again.envs[0].host, e.envs[0].host, "a stored experiment resumes on the same host");
    }

    #[test]
    fn a_list_of_hosts_is_a_campaign_one_environment_per_host() {
        let text = format!(
            "[[host]]\nname = \"b\"\nssh = \"root@198.18.7.2\"\naddr = \"198.18.7.2\"\nlocal_addr = \"198.18.7.1\"\n\n[[env]]\nkind = \"native\"\nhost = [\"local\", \"b\"]\n\n[[env]]\nkind = \"container\"\nname = \"box\"\nhost = [\"local\", \"b\"]\ninstances = [1, 2]\n{W}[[workload]]\nkind = \"tcp_stream\"\n"
        );
        // An instances sweep on a list of hosts: every count on every host.
        let swept = parse(&text).unwrap();
        let names: Vec<&str> = swept.envs.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "native [host=local]",
                "native [host=b]",
                "box [host=local] [instances=1]",
                "box [host=local] [instances=2]",
                "box [host=b] [instances=1]",
                "box [host=b] [instances=2]"
            ]
        );
        assert_eq!(swept.envs[5].group, "box [host=b]", "the instance table groups per host");
        let e = parse(&text.replace("instances = [1, 2]\n", "")).unwrap();
        let got: Vec<(&str, Option<&str>, &str)> =
            e.envs.iter().map(|x| (x.name.as_str(), x.host.as_deref(), x.group.as_str())).collect();
        assert_eq!(
            got,
            [
                ("native [host=local]", None, "native [host=local]"),
                ("native [host=b]", Some("b"), "native [host=b]"),
                ("box [host=local]", None, "box [host=local]"),
                ("box [host=b]", Some("b"), "box [host=b]"),
            ]
        );
        // Network workloads: here in the lab, there over the host's own network.
        assert!(e.has_network());
        let again = parse(&e.to_toml()).unwrap();
        let hosts: Vec<_> = again.envs.iter().map(|x| (x.name.clone(), x.host.clone())).collect();
        assert_eq!(hosts, e.envs.iter().map(|x| (x.name.clone(), x.host.clone())).collect::<Vec<_>>());
        // From the command line too.
        let mut raw =
            RawExperiment { hosts: read_toml("h.toml", &text).unwrap().hosts, ..Default::default() };
        raw.envs.push(read_flag("--env", "container:cpus=1,host=[local,b]").unwrap());
        raw.workloads.push(read_flag("--workload", "memcpy").unwrap());
        let e = validate(&raw, &Origin::Default).unwrap();
        let names: Vec<&str> = e.envs.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["container:cpus=1 [host=local]", "container:cpus=1 [host=b]"]);
    }

    #[test]
    fn a_guest_gets_a_scratch_disk_when_a_workload_writes_files_and_says_so() {
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "qemu").unwrap());
        raw.envs.push(read_flag("--env", "uml").unwrap());
        raw.workloads.push(read_flag("--workload", "fio").unwrap());
        let e = validate(&raw, &Origin::Default).unwrap();
        assert_eq!(e.envs[0].params["disk"], "virtio-blk");
        assert_eq!(e.envs[1].params["disk"], "ubd");
        let said: Vec<String> = e.sizings.iter().filter(|s| s.key == "disk").map(Sizing::line).collect();
        assert_eq!(said.len(), 2, "{said:?}");
        assert!(
            said[0].contains("writes files") && said[0].contains("disk = \"none\" goes without"),
            "{said:?}"
        );
        // Written as none: the clear error stays, naming the key.
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "qemu:disk=none").unwrap());
        raw.workloads.push(read_flag("--workload", "fio").unwrap());
        let err = validate(&raw, &Origin::Default).unwrap_err();
        assert!(err.to_string().contains("disk"), "{err}");
        // No workload writes files: no disk.
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "qemu").unwrap());
        raw.workloads.push(read_flag("--workload", "memcpy").unwrap());
        let e = validate(&raw, &Origin::Default).unwrap();
        assert_eq!(e.envs[0].params["disk"], "none");
    }

    #[test]
    fn disks_run_on_a_host_in_its_own_scratch() {
        let text = format!("[[host]]\nname = \"b\"\nssh = \"a@b\"\n\n[[env]]\nkind = \"native\"\nhost = \"b\"\n\n[[env]]\nkind = \"qemu\"\ndisk = \"virtio-blk\"\nhost = \"b\"\n\n[[workload]]\nkind = \"disk\"\n{W}");
        let e = parse(&text).unwrap();
        assert!(e.envs.iter().all(|x| x.host.as_deref() == Some("b")));
    }

    #[test]
    fn the_tester_on_a_host_needs_only_the_addresses_of_the_path() {
        let text = "[[host]]\nname = \"b\"\nssh = \"a@b\"\naddr = \"198.18.7.2\"\nlocal_addr = \"198.18.7.1\"\n\n[[host]]\nname = \"c\"\nssh = \"a@c\"\naddr = \"198.18.8.2\"\n\n[lab]\ntester_host = \"b\"\n\n[[env]]\nkind = \"native\"\n\n[[env]]\nkind = \"container\"\nhost = \"c\"\n\n[[workload]]\nkind = \"tcp_stream\"\n";
        let e = parse(text).unwrap();
        assert_eq!(e.lab.tester_host.as_deref(), Some("b"));
        // Host c needs no local_addr: its environment talks to b, not to this machine.
        assert_eq!(e.envs[1].host.as_deref(), Some("c"));
        assert_eq!(parse(&e.to_toml()).unwrap().lab.tester_host.as_deref(), Some("b"));
        // "local" is this machine: the lab's tester.
        let e = parse(
            "[lab]\ntester_host = \"local\"\n\n[[env]]\nkind = \"native\"\n[[workload]]\nkind = \"tcp_rr\"\n",
        )
        .unwrap();
        assert_eq!(e.lab.tester_host, None);
    }

    #[test]
    fn bad_hosts_name_the_line_and_the_key() {
        let cases: &[(&str, &str, &str)] = &[
            ("[[env]]\nkind = \"native\"\nhost = \"c\"\n", "host", "unknown host `c`"),
            ("[[host]]\nname = \"b\"\n\n[[env]]\nkind = \"native\"\n", "host.ssh", "needs ssh"),
            ("[[host]]\nname = \"b\"\nssh = \"-oProxyCommand=x\"\n\n[[env]]\nkind = \"native\"\n", "host.ssh", "not an ssh destination"),
            ("[[host]]\nname = \"local\"\nssh = \"a@b\"\n\n[[env]]\nkind = \"native\"\n", "host.name", "this machine"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\n[[host]]\nname = \"b\"\nssh = \"a@c\"\n\n[[env]]\nkind = \"native\"\n", "host.name", "two hosts"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\nport = 22\n\n[[env]]\nkind = \"native\"\n", "host.port", "unknown key"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\nssh_config = \"/nonexistent/cfg\"\n\n[[env]]\nkind = \"native\"\n", "host.ssh_config", "does not exist"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\naddr = \"198.18.7.2\"\nlocal_addr = \"198.18.7.1\"\n\n[[env]]\nkind = \"uml\"\nhost = \"b\"\n\n[[workload]]\nkind = \"tcp_rr\"\n", "host", "no network to the tester"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\n\n[[env]]\nkind = \"native\"\nhost = \"b\"\n\n[[workload]]\nkind = \"disk\"\ndir = \"/tmp\"\n", "host", "dir= names a directory on this machine"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\n\n[[env]]\nkind = \"native\"\nhost = \"b\"\n\n[[workload]]\nkind = \"tcp_stream\"\n", "host.addr", "addr"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\naddr = \"198.18.7.2\"\nlocal_addr = \"198.18.7.1\"\n\n[[env]]\nkind = \"native\"\nhost = [\"local\", \"b\"]\n\n[lab]\nrate = \"1Gbit\"\n\n[[workload]]\nkind = \"tcp_stream\"\n", "lab.rate", "link emulation"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\n\n[[env]]\nkind = \"native\"\nhost = [\"b\", \"b\"]\n", "host", "listed twice"),
            ("[lab]\ntester_host = \"c\"\n\n[[env]]\nkind = \"native\"\n", "lab.tester_host", "unknown host `c`"),
            ("[lab]\ntester_host = 3\n\n[[env]]\nkind = \"native\"\n", "lab.tester_host", "expected the name"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\n\n[lab]\ntester_host = \"b\"\n\n[[env]]\nkind = \"native\"\n\n[[workload]]\nkind = \"tcp_rr\"\n", "lab.tester_host", "addr"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\naddr = \"198.18.7.2\"\n\n[lab]\ntester_host = \"b\"\n\n[[env]]\nkind = \"native\"\n\n[[workload]]\nkind = \"tcp_rr\"\n", "lab.tester_host", "local_addr"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\naddr = \"198.18.7.2\"\nlocal_addr = \"198.18.7.1\"\n\n[lab]\ntester_host = \"b\"\n\n[[env]]\nkind = \"qemu\"\n\n[[workload]]\nkind = \"tcp_rr\"\n", "lab.tester_host", "a guest here"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\naddr = \"198.18.7.2\"\nlocal_addr = \"198.18.7.1\"\n\n[lab]\ntester_host = \"b\"\ndelay = \"1ms\"\n\n[[env]]\nkind = \"native\"\n\n[[workload]]\nkind = \"tcp_rr\"\n", "lab.delay", "link emulation"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\n\n[[env]]\nkind = \"native\"\nhost = []\n", "host", "empty list"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\n\n[[env]]\nkind = \"native\"\nhost = [\"local\", 2]\n", "host", "expected the name"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\n\n[[env]]\nkind = \"native\"\nhost = [\"local\", \"c\"]\n", "host", "unknown host `c`"),
            ("[[host]]\nname = \"b\"\nssh = \"a@b\"\naddr = \"nope\"\n\n[[env]]\nkind = \"native\"\n", "host.addr", "address"),
        ];
        for (text, key, words) in cases {
            let text = if text.contains("[[workload]]") { text.to_string() } else { format!("{text}{W}") };
            let e = parse(&text).unwrap_err();
            assert_eq!(e.key.as_deref(), Some(*key), "{text}: {e}");
            assert!(e.message.contains(words), "{text}: {e}");
            assert!(e.to_string().contains("h.toml:"), "names the file and line: {e}");
        }
    }
}

#[cfg(test)]
mod knob_tests {
    use super::*;

    fn parse(text: &str) -> Result<Experiment, InputError> {
        validate(&read_toml("k.toml", text)?, &Origin::Default)
    }

    const W: &str = "[[workload]]\nkind = \"syscall\"\n";

    #[test]
    fn knobs_expand_into_one_variant_per_value_each_against_the_default() {
        let text = format!(
            "[[env]]\nkind = \"native\"\n\n[[env]]\nkind = \"container\"\nname = \"c\"\ncpus = 1\nknobs = [\"no_new_privileges\", \"readonly_rootfs\"]\n{W}"
        );
        let e = parse(&text).unwrap();
        let got: Vec<(&str, Option<&str>)> =
            e.envs.iter().map(|x| (x.name.as_str(), x.against.as_deref())).collect();
        assert_eq!(
            got,
            [
                ("native", None),
                ("c", None),
                ("c [no_new_privileges=false]", Some("c")),
                ("c [readonly_rootfs=false]", Some("c")),
            ]
        );
        // Each the same but for its knob.
        assert_eq!(e.envs[2].params["no_new_privileges"], false);
        assert_eq!(e.envs[2].params["readonly_rootfs"], true);
        assert_eq!(e.envs[3].params["readonly_rootfs"], false);
        assert!(e.envs[1..].iter().all(|x| x.params["cpus"] == 1.0), "the others' parameters kept");
        // A stored experiment resumes into the same environments, each against the same.
        let again = parse(&e.to_toml()).unwrap();
        let back: Vec<(&str, Option<&str>)> =
            again.envs.iter().map(|x| (x.name.as_str(), x.against.as_deref())).collect();
        assert_eq!(back, got);
        assert_eq!(again.envs[2].params, e.envs[2].params);
        // From the command line: the list syntax.
        let mut raw = RawExperiment::default();
        raw.envs.push(read_flag("--env", "container:knobs=[readonly_rootfs]").unwrap());
        raw.workloads.push(read_flag("--workload", "syscall").unwrap());
        let e = validate(&raw, &Origin::Default).unwrap();
        let names: Vec<&str> = e.envs.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["container", "container [readonly_rootfs=false]"]);
    }

    #[test]
    fn wrong_knobs_and_against_are_refused_with_the_key_and_the_fix() {
        for (env, words) in [
            (
                "kind = \"container\"\nknobs = [\"colour\"]",
                "`colour` is not a knob of `container` (its knobs: seccomp",
            ),
            ("kind = \"native\"\nknobs = [\"seccomp\"]", "`seccomp` is not a knob of `native` (it has none)"),
            ("kind = \"container\"\nknobs = [\"readonly_rootfs\", \"readonly_rootfs\"]", "listed twice"),
            ("kind = \"container\"\nreadonly_rootfs = false\nknobs = [\"readonly_rootfs\"]", "both set"),
            ("kind = \"container\"\nagainst = \"nobody\"", "no environment is named `nobody`"),
            ("kind = \"container\"\nname = \"c\"\nagainst = \"c\"", "against itself"),
            ("kind = \"container\"\nagainst = 3", "expected the name of another environment"),
            ("kind = \"container\"\nseccomp = [\"none\", \"default\"]", "knobs = [...]"),
        ] {
            let text = format!("[[env]]\nkind = \"native\"\n\n[[env]]\n{env}\n{W}");
            let e = parse(&text).unwrap_err();
            assert!(e.message.contains(words), "{env}: {e}");
            assert!(e.to_string().contains("k.toml:"), "names the file and line: {e}");
        }
        // Written by hand: any environment against another on the same machine.
        let e = parse(&format!(
            "[[env]]\nkind = \"native\"\n\n[[env]]\nkind = \"container\"\nname = \"a\"\n\n[[env]]\nkind = \"container\"\nname = \"b\"\ncpus = 1\nagainst = \"a\"\n{W}"
        ))
        .unwrap();
        assert_eq!(e.envs[2].against.as_deref(), Some("a"));
    }

    #[test]
    fn the_knobs_flag_adds_knobs_to_every_environment_of_its_kind() {
        let mut raw = RawExperiment::default();
        for e in ["native", "container:name=a", "container:name=b,cpus=1"] {
            raw.envs.push(read_flag("--env", e).unwrap());
        }
        raw.workloads.push(read_flag("--workload", "syscall").unwrap());
        add_knobs(&mut raw, "container:readonly_rootfs").unwrap();
        let e = validate(&raw, &Origin::Default).unwrap();
        let names: Vec<&str> = e.envs.iter().map(|x| x.name.as_str()).collect();
        assert_eq!(names, ["native", "a", "a [readonly_rootfs=false]", "b", "b [readonly_rootfs=false]"]);
        assert_eq!(e.envs[4].against.as_deref(), Some("b"));
        for (v, words) in [
            ("container", "expected KIND:KNOB"),
            ("container:", "no knob named"),
            ("qemu:mitigations", "no environment of kind `qemu`"),
            ("container:seccomp", "already lists its knobs"),
        ] {
            let e = add_knobs(&mut raw, v).unwrap_err();
            assert!(e.message.contains(words), "{v}: {e}");
        }
    }
}
