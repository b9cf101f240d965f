//! The conformance suite against the reference model: a case the model
//! fails is a bug in one of the two. On virtual time: the model reads the
//! case's clock and waits only on tokio timers.

#![cfg(feature = "testkit")]

use std::sync::Arc;

use delayd_core::testkit::ModelBroker;

delayd_core::conformance_tests!(
    virtual_time | clock | async move { Arc::new(ModelBroker::with_clock(clock)) }
);
delayd_core::conformance_tests_extended!(
    virtual_time | clock | async move { Arc::new(ModelBroker::with_clock(clock)) }
);
delayd_core::conformance_tests_schedules!(
    virtual_time | clock | async move { Arc::new(ModelBroker::with_clock(clock)) }
);
delayd_core::conformance_tests_schedules_extended!(
    virtual_time | clock | async move { Arc::new(ModelBroker::with_clock(clock)) }
);
delayd_core::conformance_tests_flow!(
    virtual_time | clock | async move { Arc::new(ModelBroker::with_clock(clock)) }
);
delayd_core::conformance_tests_time_at_call!(
    virtual_time | clock | async move { Arc::new(ModelBroker::with_clock(clock)) }
);
delayd_core::conformance_tests_retention!(
    virtual_time | clock | async move { Arc::new(ModelBroker::with_clock(clock)) }
);
delayd_core::conformance_tests_history!(
    virtual_time | clock | async move { Arc::new(ModelBroker::with_clock(clock)) }
);
delayd_core::conformance_tests_history_extended!(
    virtual_time | clock | async move { Arc::new(ModelBroker::with_clock(clock)) }
);
delayd_core::conformance_tests_replace!(
    virtual_time | clock | async move { Arc::new(ModelBroker::with_clock(clock)) }
);
