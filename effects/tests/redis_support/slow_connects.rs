//! A TCP proxy in front of a Redis that is slow to open connections, as a loaded machine is
//! when a fleet starts at once: each connection it accepts waits `delay` before it reaches
//! Redis, so the client's handshake is answered that late; once open, a connection is as
//! fast as the loopback. Runs on the test's tokio runtime; stops accepting when dropped.

#![allow(dead_code)]

use std::time::Duration;

/// The proxy: connect to [`port`](Self::port) instead of Redis's.
pub struct SlowConnects {
    port: u16,
    accepting: tokio::task::JoinHandle<()>,
}

impl SlowConnects {
    /// A proxy to the Redis on `redis_port` whose connections open `delay` late.
    pub async fn start(redis_port: u16, delay: Duration) -> SlowConnects {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let port = listener.local_addr().expect("bound").port();
        let accepting = tokio::spawn(async move {
            while let Ok((mut client, _)) = listener.accept().await {
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let Ok(mut server) =
                        tokio::net::TcpStream::connect(("127.0.0.1", redis_port)).await
                    else {
                        return;
                    };
                    let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
                });
            }
        });
        SlowConnects { port, accepting }
    }

    /// The port to connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:PORT/NAME`, a budget reached through the proxy.
    pub fn budget_url(&self, name: &str) -> String {
        format!("redis://127.0.0.1:{}/{name}", self.port)
    }
}

impl Drop for SlowConnects {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}
