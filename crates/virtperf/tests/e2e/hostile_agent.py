#!/usr/bin/env python3
"""A hostile agent for virtperf's e2e tests (VIRTPERF_NATIVE_AGENT=this file).

It speaks the protocol (docs/protocol.md) well enough to be launched and calibrated, then answers
each `command` workload with what its `cmd` names — frames that are well formed but hostile:

  ok             a plain result
  extra-number   a result whose `extra` is a number (the host once panicked adding a key to it)
  escape         an error whose message carries terminal escape sequences
  flood          a result, then FLOOD_FRAMES results of ~1 MiB each for the same (now stale) tag
  laps           LAPS lap frames before its result (an armed run's boundaries)
  endless        one frame-prefixed line of ENDLESS_MIB MiB with no newline, then silence
  huge           a result whose counts do not fit the protocol's integers
  slow           a plain result after SLOW_S seconds (another environment's flood meanwhile
                 has nobody reading it)

Any other workload (the calibration's noops) gets a plain result.
"""
import json
import os
import sys
import time

FLOOD_FRAMES = int(os.environ.get("HOSTILE_FLOOD_FRAMES", "1500"))
LAPS = int(os.environ.get("HOSTILE_LAPS", "100000"))
ENDLESS_MIB = int(os.environ.get("HOSTILE_ENDLESS_MIB", "300"))
SLOW_S = float(os.environ.get("HOSTILE_SLOW_S", "5"))

out = sys.stdout.buffer


def send(obj):
    out.write(b"@vp " + json.dumps(obj).encode() + b"\n")
    out.flush()


def now():
    return time.monotonic_ns()


def result(tag, samples=None, extra=None, elapsed=1_000_000):
    r = {
        "v": 1,
        "tag": tag,
        "type": "result",
        "samples": samples or [],
        "guest_elapsed_ns": elapsed,
        "guest_cpu": {"user_ns": 0, "system_ns": 0},
    }
    if extra is not None:
        r["extra"] = extra
    send(r)


def act(tag, workload):
    params = workload.get("params", {})
    # `cmd` is "echo SCENARIO": its program must exist on the host, which validation checks.
    what = params.get("cmd", "").split()[-1] if workload.get("kind") == "command" else "ok"
    plain = [{"metric": "command_time", "value": 0.001, "unit": "s"}] if workload.get("kind") == "command" else []
    if what == "extra-number":
        result(tag, plain, extra=5)
    elif what == "escape":
        send({
            "v": 1, "tag": tag, "type": "error", "code": "workload_failed", "kind": "other",
            "message": "boom \x1b[2J\x1b]0;owned\x07 \x1b[31mred\x1b[0m \u202egnp.exe",
        })
    elif what == "flood":
        result(tag, plain)
        zeros = ",".join(["0"] * 500_000)
        line = ('@vp {"v":1,"tag":%d,"type":"result","samples":[],"guest_elapsed_ns":1,'
                '"guest_cpu":{"user_ns":0,"system_ns":0},"extra":{"a":[%s]}}\n' % (tag, zeros)).encode()
        for _ in range(FLOOD_FRAMES):
            out.write(line)
        out.flush()
    elif what == "laps":
        lap = b'@vp {"v":1,"tag":%d,"type":"lap","name":"x"}\n' % tag
        out.write(lap * LAPS)
        out.flush()
        result(tag, plain)
    elif what == "endless":
        out.write(b"@vp ")
        chunk = b"x" * (1 << 20)
        for _ in range(ENDLESS_MIB):
            out.write(chunk)
        out.flush()
        time.sleep(3600)
    elif what == "slow":
        time.sleep(SLOW_S)
        result(tag, plain)
    elif what == "huge":
        result(tag, plain, elapsed=10**30)
    else:
        result(tag, plain)


def main():
    send({"v": 1, "tag": 0, "type": "hello", "agent_version": "hostile", "pid": os.getpid(), "clock_ns": now()})
    armed = {}
    for line in sys.stdin.buffer:
        try:
            req = json.loads(line)
        except ValueError:
            continue
        tag, kind = req.get("tag", 0), req.get("type")
        if kind == "ping":
            send({"v": 1, "tag": tag, "type": "pong", "clock_ns": now()})
        elif kind == "info":
            send({"v": 1, "tag": tag, "type": "info", "kernel": "hostile", "cpu_model": "x", "cpus": 1, "memory_kib": 1})
        elif kind == "shutdown":
            send({"v": 1, "tag": tag, "type": "bye"})
            return
        elif kind == "stop":
            send({"v": 1, "tag": tag, "type": "stopping"})
        elif kind == "run":
            if req.get("armed"):
                armed[tag] = req["workload"]
                send({"v": 1, "tag": tag, "type": "armed"})
            else:
                send({"v": 1, "tag": tag, "type": "started"})
                act(tag, req["workload"])
        elif kind == "go":
            target = req.get("target")
            if target in armed:
                act(target, armed.pop(target))


if __name__ == "__main__":
    main()
