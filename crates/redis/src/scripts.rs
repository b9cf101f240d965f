//! The Lua scripts, one per state transition. Each is `lua/common.lua`
//! followed by its own body, and runs with EVALSHA (falling back to EVAL
//! once after a Redis restart flushed the script cache).

use std::sync::LazyLock;

use redis::Script;

macro_rules! script {
    ($name:ident, $file:literal) => {
        pub(crate) static $name: LazyLock<Script> = LazyLock::new(|| {
            Script::new(concat!(
                include_str!("../lua/common.lua"),
                "\n",
                include_str!(concat!("../lua/", $file))
            ))
        });
    };
}

script!(ENQUEUE, "enqueue.lua");
script!(GET, "get.lua");
script!(CANCEL, "cancel.lua");
script!(RESCHEDULE, "reschedule.lua");
script!(LEASE, "lease.lua");
script!(PEEK, "peek.lua");
script!(LEASE_ONE, "lease_one.lua");
script!(ACK, "ack.lua");
script!(NACK, "nack.lua");
script!(BURY, "bury.lua");
script!(EXTEND, "extend.lua");
script!(REDRIVE, "redrive.lua");
script!(LIST, "list.lua");
script!(STATS, "stats.lua");
script!(PROMOTE, "promote.lua");
script!(DROP, "drop.lua");
