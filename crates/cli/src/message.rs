//! `delayd message QUEUE ID`: one message by id (`GET
//! /v1/queues/{queue}/messages/{id}`), without leasing it. It is how a
//! person sees a message in any state, a retained `acked` or `cancelled`
//! one included (its queue's `retain_ms`): with its `ended_at`, and no
//! payload, which is not kept.

use clap::Args;
use delayd_client::MessageView;

use crate::commands::{format_time, print_payload};
use crate::output::{outln, print_json};
use crate::Connection;

#[derive(Debug, Args)]
pub struct MessageArgs {
    #[command(flatten)]
    conn: Connection,
    queue: String,
    id: String,
}

pub async fn show(args: MessageArgs) -> anyhow::Result<()> {
    let message = args
        .conn
        .client()?
        .get_message(&args.queue, &args.id)
        .await?;
    if args.conn.json {
        return print_json(&message);
    }
    print_message(&message)
}

/// The states of a message that ended and is only retained.
const ENDED: [&str; 2] = ["acked", "cancelled"];

/// One field a line, then the headers and the payload; a time the message
/// does not have (`lease_until` while not leased...) gets no line.
fn print_message(m: &MessageView) -> anyhow::Result<()> {
    outln!("id          {}", m.id)?;
    outln!("queue       {}", m.queue)?;
    outln!("state       {}", m.state)?;
    outln!("seq         {}", m.seq)?;
    outln!("deliver_at  {}", format_time(m.deliver_at))?;
    outln!("enqueued_at {}", format_time(m.enqueued_at))?;
    let attempts = match m.max_attempts {
        Some(max) => format!("{} of {max}", m.attempts),
        None => m.attempts.to_string(),
    };
    outln!("attempts    {attempts}")?;
    outln!("priority    {}", m.priority)?;
    if let Some(key) = &m.key {
        outln!("key         {key}")?;
    }
    if m.deferrals > 0 {
        outln!("deferrals   {}", m.deferrals)?;
    }
    let times = [
        ("lease_until", m.lease_until),
        ("died_at    ", m.died_at),
        ("ended_at   ", m.ended_at),
    ];
    for (label, time) in times {
        if let Some(time) = time {
            outln!("{label} {}", format_time(time))?;
        }
    }
    if let Some(error) = &m.last_error {
        outln!("last_error  {error}")?;
    }
    for (name, value) in &m.headers {
        outln!("header      {name}: {value}")?;
    }
    if ENDED.contains(&m.state.as_str()) {
        outln!("payload     none kept (the message ended; only its record is retained)")?;
        return Ok(());
    }
    print_payload(&m.payload)
}
