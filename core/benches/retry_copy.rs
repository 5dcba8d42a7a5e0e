//! Retries must not copy the conversation: bytes allocated per retry, counted by a global
//! allocator, on a 10,000-message conversation beside a 10-message one.
//!
//! Run: `cargo bench -p rebound-core --bench retry_copy`
//!
//! A retry is one failed attempt handled (`ProviderFailed` → `NotifyRetry`, `Sleep`) plus
//! its timer (`TimerFired` → `SendRequest` carrying the conversation snapshot). The failure
//! values are built before counting starts, so the figures are the machine's own.

use rebound_core::{
    AgentMachine, Command, ContentBlock, Conversation, Event, FailureKind, Handled, MachineConfig,
    Message, Millis, ProviderFailure, RequestId, RetryConfig,
};
use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Counts bytes and calls of every allocation (a `realloc` counts its new size).
struct Counting;

static BYTES: AtomicU64 = AtomicU64::new(0);
static CALLS: AtomicU64 = AtomicU64::new(0);

// SAFETY: every method forwards to `System` with the caller's arguments unchanged.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        CALLS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        BYTES.fetch_add(layout.size() as u64, Ordering::Relaxed);
        CALLS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        BYTES.fetch_add(new_size as u64, Ordering::Relaxed);
        CALLS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: forwarded as is.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

fn counted<T>(f: impl FnOnce() -> T) -> (T, u64, u64) {
    let (b0, c0) = (BYTES.load(Ordering::Relaxed), CALLS.load(Ordering::Relaxed));
    let value = f();
    let (b1, c1) = (BYTES.load(Ordering::Relaxed), CALLS.load(Ordering::Relaxed));
    (value, b1 - b0, c1 - c0)
}

/// `messages` alternating user and assistant text messages of about 500 bytes each.
fn conversation(messages: usize) -> Conversation {
    let mut c = Conversation::new();
    for i in 0..messages {
        let text = format!("message {i}: {}", "lorem ipsum dolor sit amet ".repeat(18));
        c.push(if i % 2 == 0 {
            Message::user_text(text)
        } else {
            Message::assistant_text(text)
        });
    }
    c
}

struct Figures {
    messages: usize,
    approx_bytes: usize,
    clone_bytes: u64,
    retries: u64,
    bytes_per_retry: f64,
    allocs_per_retry: f64,
    ns_per_retry: f64,
    shared: bool,
}

fn measure(messages: usize, retries: u64) -> Figures {
    let base = conversation(messages);
    let approx_bytes = base.approx_bytes();
    let (copy, clone_bytes, _) = counted(|| base.clone());
    drop(black_box(copy));

    let config = MachineConfig::default().with_retry(
        RetryConfig::default()
            .with_max_attempts(u32::try_from(retries + 1).expect("retries fit in u32")),
    );
    let mut machine = AgentMachine::with_conversation(config, 1, base);
    let mut now = Millis(0);
    let mut request: Option<RequestId> = None;
    let mut first_snapshot = None;
    let mut shared = true;
    for command in machine.step(
        now,
        Event::UserMessage {
            content: vec![ContentBlock::text("and now fix the test")],
        },
    ) {
        if let Command::SendRequest {
            request: r,
            conversation,
            ..
        } = command
        {
            request = Some(r);
            first_snapshot = Some(conversation);
        }
    }
    let first_snapshot = first_snapshot.expect("the user message starts a request");
    let failures: Vec<ProviderFailure> = (0..retries)
        .map(|_| ProviderFailure::new(FailureKind::Unavailable, "Overloaded").with_status(529))
        .collect();
    let mut commands = Vec::with_capacity(8);
    let started = Instant::now();
    let ((), bytes, calls) = counted(|| {
        for failure in failures {
            let Some(r) = request.take() else {
                panic!("every retry sends a request");
            };
            let handled = machine.handle(
                now,
                Event::ProviderFailed {
                    request: r,
                    failure,
                },
            );
            assert_eq!(handled, Handled::Accepted);
            let mut timer = None;
            while let Some(command) = machine.poll() {
                if let Command::Sleep { timer: t, delay_ms } = &command {
                    timer = Some(*t);
                    now = now.plus(*delay_ms);
                }
                commands.push(command);
            }
            commands.clear();
            let timer = timer.expect("a retry sleeps first");
            let handled = machine.handle(now, Event::TimerFired { timer });
            assert_eq!(handled, Handled::Accepted);
            while let Some(command) = machine.poll() {
                if let Command::SendRequest {
                    request: r,
                    conversation,
                    ..
                } = &command
                {
                    request = Some(*r);
                    shared &= Arc::ptr_eq(conversation.arc(), first_snapshot.arc());
                }
                commands.push(command);
            }
            commands.clear();
        }
    });
    let elapsed = started.elapsed();
    Figures {
        messages: machine.conversation().len(),
        approx_bytes,
        clone_bytes,
        retries,
        bytes_per_retry: bytes as f64 / retries as f64,
        allocs_per_retry: calls as f64 / retries as f64,
        ns_per_retry: elapsed.as_nanos() as f64 / retries as f64,
        shared,
    }
}

fn main() {
    // `cargo bench` passes `--bench`; `cargo test --benches` runs this too, so keep it quick.
    let retries = if std::env::args().any(|a| a == "--bench") {
        10_000
    } else {
        100
    };
    println!("| conversation | approx. size | deep clone allocates | retries | bytes allocated per retry | allocations per retry | time per retry | every retry sends the same `Arc` |");
    println!("|---:|---:|---:|---:|---:|---:|---:|---|");
    for messages in [10, 10_000] {
        let f = measure(messages, retries);
        println!(
            "| {} messages | {:.1} KB | {:.1} KB | {} | {:.0} B | {:.1} | {:.0} ns | {} |",
            f.messages,
            f.approx_bytes as f64 / 1000.0,
            f.clone_bytes as f64 / 1000.0,
            f.retries,
            f.bytes_per_retry,
            f.allocs_per_retry,
            f.ns_per_retry,
            if f.shared { "yes" } else { "**no**" },
        );
        assert!(f.shared, "a retry sent a different conversation allocation");
        assert!(
            f.bytes_per_retry < 4_096.0,
            "a retry allocated {:.0} bytes: is the conversation being copied?",
            f.bytes_per_retry
        );
    }
}
