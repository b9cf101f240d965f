//! The conformance suite against the reference model: a case the model
//! fails is a bug in one of the two.

#![cfg(feature = "testkit")]

use std::sync::Arc;

use delayd_core::testkit::ModelBroker;

async fn model() -> Arc<ModelBroker> {
    Arc::new(ModelBroker::new())
}

delayd_core::conformance_tests!(model());
delayd_core::conformance_tests_extended!(model());
