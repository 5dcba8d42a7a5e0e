//! `rebound durable serve`: the agent of `rebound run` as a Restate Virtual Object.

use crate::run::{receiver_for, telemetry_options, usage_error, wait_for_signal, Agent};
use crate::{DurableServeArgs, EXIT_FAILED, EXIT_OK};
use rebound_durable::{register, serve as serve_endpoint, DurableAgent};
use std::sync::Arc;

/// `rebound durable serve`: serves until Ctrl-C or SIGTERM (exit 0). Exit 2 when the port
/// cannot be had, an option is wrong, or the registration with `--register` fails.
pub async fn serve(args: DurableServeArgs) -> i32 {
    let agent = match Agent::build(&args.agent, args.events).await {
        Ok(agent) => agent,
        Err(code) => return code,
    };
    if let Err(code) = Agent::check_budget(agent.redis.as_ref()).await {
        return code;
    }
    let mut durable = DurableAgent::new(agent.config, agent.providers);
    if let Some(tools) = agent.tools {
        durable = durable.tools(Arc::new(tools));
    }
    if let Some(budget) = agent.budget {
        durable = durable.budget(budget);
    }
    if let Some(seed) = args.seed {
        durable = durable.seed(seed);
    }
    if let Some(dir) = &args.trace_dir {
        if let Err(e) = std::fs::create_dir_all(dir) {
            return usage_error(format!("cannot create {}: {e}", dir.display()));
        }
        durable = durable.traces(dir.clone());
    }
    // The spans and metrics of `rebound run`, exported when the OTEL_* environment asks.
    durable = durable.telemetry(telemetry_options(args.otel_capture_content));
    let events = args.events;
    durable = durable.receivers(Arc::new(move |_: &str| receiver_for(events)));
    let listener = match tokio::net::TcpListener::bind(("127.0.0.1", args.port)).await {
        Ok(listener) => listener,
        Err(e) => return usage_error(format!("cannot listen on 127.0.0.1:{}: {e}", args.port)),
    };
    let endpoint = match listener.local_addr() {
        Ok(addr) => format!("http://{addr}"),
        Err(e) => return usage_error(format!("cannot listen on 127.0.0.1:{}: {e}", args.port)),
    };
    eprintln!("rebound: durable endpoint on {endpoint} (Restate service `Agent`)");
    let server = tokio::spawn(serve_endpoint(durable, listener));
    if let Some(admin) = &args.register {
        if let Err(e) = register(admin, &endpoint).await {
            server.abort();
            return usage_error(e);
        }
        eprintln!("rebound: registered {endpoint} with Restate at {admin}");
    }
    tokio::select! {
        ended = server => {
            eprintln!("rebound: the endpoint stopped: {ended:?}");
            EXIT_FAILED
        }
        () = wait_for_signal() => EXIT_OK,
    }
}
