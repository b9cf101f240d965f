//! The Lua function library: `lua/common.lua` and `lua/flow.lua` once, then each
//! `lua/<op>.lua` body wrapped in a function and registered as
//! `delayd_<version>_<op>`. Loaded with `FUNCTION LOAD REPLACE` (on every
//! primary of a Cluster) when a node connects, and again whenever a call
//! finds it missing (a Redis restarted without persistence, a new primary);
//! each transition is then one `FCALL`, which runs only the body: the
//! prelude's helpers are defined once per load, not once per call.
//!
//! The version is a hash of the library's text, so two delayd versions
//! whose Lua differs load two libraries side by side and each calls its
//! own (a rolling upgrade; docs/redis.md).

use std::sync::LazyLock;

use crate::keys::fnv1a;

/// One function of the library, by its index in [`OPS`].
#[derive(Clone, Copy, Debug)]
pub(crate) struct Function(usize);

impl Function {
    /// The registered name, e.g. `delayd_0123456789abcdef_lease`.
    pub(crate) fn name(self) -> &'static str {
        &LIBRARY.function_names[self.0]
    }
}

macro_rules! library {
    ($(($index:literal, $name:ident, $op:literal)),* $(,)?) => {
        $(pub(crate) const $name: Function = Function($index);)*
        /// Each function's op name and Lua body, in index order.
        const OPS: &[(&str, &str)] = &[
            $(($op, include_str!(concat!("../lua/", $op, ".lua")))),*
        ];
    };
}

library! {
    (0, ENQUEUE, "enqueue"),
    (1, GET, "get"),
    (2, CANCEL, "cancel"),
    (3, RESCHEDULE, "reschedule"),
    (4, LEASE, "lease"),
    (5, PEEK, "peek"),
    (6, LEASE_ONE, "lease_one"),
    (7, ACK, "ack"),
    (8, NACK, "nack"),
    (9, BURY, "bury"),
    (10, EXTEND, "extend"),
    (11, REDRIVE, "redrive"),
    (12, LIST, "list"),
    (13, STATS, "stats"),
    (14, PROMOTE, "promote"),
    (15, DROP, "drop"),
    (16, SCHED_SET, "sched_set"),
    (17, SCHED_FIRE, "sched_fire"),
    (18, FLOW_SET, "flow_set"),
    (19, DEFER, "defer"),
    (20, KEY_INFO, "key_info"),
    (21, FLOW_EVAL, "flow_eval"),
    (22, EVENTS, "events"),
}

/// The library as loaded into Redis.
pub(crate) struct Library {
    /// `delayd_<16 hex digits>`.
    pub(crate) name: String,
    /// The `FUNCTION LOAD` payload, starting with the `#!lua name=` line.
    pub(crate) code: String,
    function_names: Vec<String>,
}

pub(crate) static LIBRARY: LazyLock<Library> = LazyLock::new(|| build(OPS));

/// Builds a library from the prelude and `ops`; its name is derived from
/// its text, so any change to the Lua is a new version.
fn build(ops: &[(&str, &str)]) -> Library {
    let mut body = String::from(include_str!("../lua/common.lua"));
    body.push_str(include_str!("../lua/flow.lua"));
    for (op, lua) in ops {
        body.push_str(&format!("\nlocal function op_{op}()\n{lua}\nend\n"));
    }
    let name = format!("delayd_{:016x}", fnv1a(body.as_bytes()));
    let mut function_names = Vec::with_capacity(ops.len());
    for (op, _) in ops {
        let function = format!("{name}_{op}");
        body.push_str(&format!(
            "redis.register_function('{function}', function(keys, args) bind(keys, args) return op_{op}() end)\n"
        ));
        function_names.push(function);
    }
    Library {
        code: format!("#!lua name={name}\n{body}"),
        name,
        function_names,
    }
}

/// Whether Redis answered that the called function is not loaded.
pub(crate) fn is_missing(err: &redis::RedisError) -> bool {
    err.to_string().contains("Function not found")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_is_registered_under_the_versioned_name() {
        let lib = &*LIBRARY;
        assert!(lib.code.starts_with(&format!("#!lua name={}\n", lib.name)));
        for (i, (op, _)) in OPS.iter().enumerate() {
            let name = Function(i).name();
            assert_eq!(name, format!("{}_{op}", lib.name));
            assert!(lib.code.contains(&format!("register_function('{name}'")));
        }
        assert_eq!(LEASE.name(), format!("{}_lease", lib.name));
    }

    #[test]
    fn the_version_follows_the_lua_text() {
        let a = build(&[("x", "return 1")]);
        let b = build(&[("x", "return 2")]);
        assert_ne!(a.name, b.name);
        assert_eq!(a.name, build(&[("x", "return 1")]).name);
    }
}
