//! The minimal `sendmmsg` loop bench/rfc2544.sh holds virtperf's generator against: no pacing, no
//! stamps, no accounting — 64 datagrams per call, as fast as the kernel takes them — and its
//! receiving twin (`recvmmsg`, counting). What it reaches is the ceiling of a generator on this
//! path; `frames` should come within 10 % of it.
//!
//!   sendmmsg_loop send BIND_IP DEST_IP:PORT SECONDS PAYLOAD
//!   sendmmsg_loop recv BIND_IP:PORT SECONDS           (prints datagrams received per second)

use std::net::UdpSocket;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

/// One header per buffer, each pointing at its own iovec. The iovecs are returned too and must
/// outlive the headers (moving the Vec keeps its heap block, so the pointers stay valid).
fn headers(bufs: &mut [Vec<u8>]) -> (Vec<libc::iovec>, Vec<libc::mmsghdr>) {
    let mut iov: Vec<libc::iovec> =
        bufs.iter_mut().map(|b| libc::iovec { iov_base: b.as_mut_ptr().cast(), iov_len: b.len() }).collect();
    let msgs = iov
        .iter_mut()
        .map(|v| {
            // SAFETY: mmsghdr is plain data; all-zero is a valid empty header.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
            m
        })
        .collect();
    (iov, msgs)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a: Vec<String> = std::env::args().collect();
    let usage = "usage: sendmmsg_loop send BIND_IP DEST:PORT SECONDS PAYLOAD | recv BIND:PORT SECONDS";
    match a.get(1).map(String::as_str) {
        Some("send") if a.len() == 6 => {
            let s = UdpSocket::bind((a[2].as_str(), 0))?;
            s.connect(&a[3])?;
            let secs: f64 = a[4].parse()?;
            let payload: usize = a[5].parse()?;
            let mut bufs = vec![vec![0u8; payload]; 64];
            let (_iov, mut msgs) = headers(&mut bufs);
            let (t0, mut sent) = (Instant::now(), 0u64);
            while t0.elapsed().as_secs_f64() < secs {
                // SAFETY: the headers point at live iovecs and buffers; the socket is connected.
                let n = unsafe { libc::sendmmsg(s.as_raw_fd(), msgs.as_mut_ptr(), 64, 0) };
                sent += n.max(0) as u64;
            }
            println!("{}", sent as f64 / t0.elapsed().as_secs_f64());
        }
        Some("recv") if a.len() == 4 => {
            let s = UdpSocket::bind(&a[2])?;
            s.set_read_timeout(Some(Duration::from_millis(100)))?;
            let secs: f64 = a[3].parse()?;
            let mut bufs = vec![vec![0u8; 2048]; 64];
            let (_iov, mut msgs) = headers(&mut bufs);
            let (mut got, mut first, mut last) = (0u64, None::<Instant>, Instant::now());
            let start = Instant::now();
            while start.elapsed().as_secs_f64() < secs + 5.0 {
                // SAFETY: the kernel writes at most iov_len bytes into each live buffer.
                let n = unsafe {
                    libc::recvmmsg(
                        s.as_raw_fd(),
                        msgs.as_mut_ptr(),
                        64,
                        libc::MSG_WAITFORONE,
                        std::ptr::null_mut(),
                    )
                };
                if n > 0 {
                    got += n as u64;
                    first.get_or_insert_with(Instant::now);
                    last = Instant::now();
                } else if first.is_some() && last.elapsed() > Duration::from_millis(500) {
                    break;
                }
            }
            let secs = first.map(|f| last.duration_since(f).as_secs_f64()).unwrap_or(0.0).max(1e-9);
            println!("{}", got as f64 / secs);
        }
        _ => return Err(usage.into()),
    }
    Ok(())
}
