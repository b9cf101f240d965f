//! RedisBroker's integration tests, one binary (one link) for all of them:
//! one module per test file. `support` starts real redis-server processes;
//! the tests that keep to their own key prefix share one server (and one
//! cluster) per process, the others start their own. `failover` is the
//! replica failover harness of `replica_failover.rs`.

mod failover;
mod support;

mod batching;
mod cluster_node_restart;
mod cluster_promotion;
mod conformance_cluster;
mod conformance_single;
mod conformance_virtual;
mod flow_fairness;
mod flow_lua;
mod flow_nodes;
mod flow_old_records;
mod function_library;
mod model_equivalence;
mod pubsub_killed;
mod racing_nodes;
mod ready_order;
mod redis_restart;
mod rediss;
mod replace_nodes;
mod replica_failover;
mod schedules;
mod schedules_redis_down;
mod seq_order;
