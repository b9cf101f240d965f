//! The fixed byte session of `session_bytes` over the durable LocalBroker
//! (the command tests run over it through `local_broker`).

use crate::common::{start_local, Client};
use crate::session_bytes::{check, SESSION};

#[tokio::test]
async fn fixed_session_over_local_broker() {
    let server = start_local().await;
    let mut c = Client::connect(server.addr).await;
    c.send(SESSION).await;
    check(&c.read_to_end().await);
}
