//! `-nameserver HOST[:PORT]`: a rank's publish, unpublish or lookup put to Hydra's outside
//! name server (`hydra_nameserver`), one connection per request as Hydra's `mpiexec` does,
//! so that separate jobs (ours and Hydra's) find each other's ports. The wire format is
//! `libi::nameserver`'s; this moves the bytes, bounded in time and size.

use libi::msg::NameOp;
use libi::nameserver::{answer_len, decode_answer, encode_request, Address};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long one request may take, connection included (a server that accepts and never
/// answers must not hold the rank's MPI call forever).
const REQUEST_LIMIT: Duration = Duration::from_secs(10);

/// Put `op` to the name server at `addr`: whether it succeeded and the value looked up, or
/// a line saying why it could not be asked.
pub async fn ask(addr: &Address, op: &NameOp) -> Result<(bool, Option<String>), String> {
    let what = match op {
        NameOp::Publish { service, .. } => format!("publish '{service}'"),
        NameOp::Unpublish { service } => format!("unpublish '{service}'"),
        NameOp::Lookup { service } => format!("look up '{service}'"),
    };
    let exchange = async {
        let request = encode_request(op).map_err(|e| e.to_string())?;
        let mut s = TcpStream::connect((addr.host.as_str(), addr.port))
            .await
            .map_err(|e| format!("cannot connect: {e}"))?;
        s.write_all(&request).await.map_err(|e| format!("cannot send: {e}"))?;
        let mut header = [0u8; 4];
        s.read_exact(&mut header).await.map_err(|e| format!("no answer: {e}"))?;
        let mut body = vec![0u8; answer_len(header).map_err(|e| e.to_string())?];
        s.read_exact(&mut body).await.map_err(|e| format!("a cut answer: {e}"))?;
        decode_answer(op, &body).map_err(|e| e.to_string())
    };
    match tokio::time::timeout(REQUEST_LIMIT, exchange).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer within {} s", REQUEST_LIMIT.as_secs())),
    }
    .map_err(|e| format!("name server {addr}: cannot {what}: {e}"))
}
