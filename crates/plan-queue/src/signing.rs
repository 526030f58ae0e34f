//! Signed jobs. Whoever can write to the Redis can add jobs, and a worker runs any job of the
//! right shape; with a shared secret (`PLAN_QUEUE_SECRET` on both sides), a coordinator signs
//! each job and a worker refuses jobs that are unsigned or were altered after signing.
//!
//! The signature is HMAC-SHA-256 with the secret as key, over the job's name, its id and its
//! data without `signature`, as canonical JSON (objects' keys sorted, no spaces), joined by
//! `\n`; it travels in the data as `"signature": "<64 lower-case hex digits>"`. A producer in
//! another language signs the same bytes (Python: `hmac.new(key, msg, "sha256").hexdigest()`,
//! with `json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False)`).

use hmac::{KeyInit, Mac};
use serde_json::Value;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// The data's field that holds the signature.
pub const SIGNATURE_FIELD: &str = "signature";

/// A queue's shared secret.
#[derive(Clone)]
pub struct QueueSecret(Vec<u8>);

impl std::fmt::Debug for QueueSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("QueueSecret(…)")
    }
}

/// Why a worker refused a job.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unsigned {
    /// The job carries no signature.
    #[error("the job is not signed, and this worker runs only jobs signed with its queue secret")]
    Missing,
    /// The signature does not match the job (another secret, or the job was altered).
    #[error(
        "the job's signature does not match it: it was signed with another secret, or altered after it was signed"
    )]
    Mismatch,
}

impl QueueSecret {
    /// A secret from its bytes (an empty one signs nothing: `None`).
    pub fn new(bytes: impl Into<Vec<u8>>) -> Option<QueueSecret> {
        let bytes = bytes.into();
        (!bytes.is_empty()).then_some(QueueSecret(bytes))
    }

    fn mac(&self, name: &str, id: &str, data: &Value) -> HmacSha256 {
        #[allow(clippy::expect_used, reason = "HMAC takes a key of any length")]
        let mut mac = HmacSha256::new_from_slice(&self.0).expect("HMAC takes a key of any length");
        let mut unsigned = data.clone();
        if let Some(object) = unsigned.as_object_mut() {
            object.remove(SIGNATURE_FIELD);
        }
        mac.update(name.as_bytes());
        mac.update(b"\n");
        mac.update(id.as_bytes());
        mac.update(b"\n");
        mac.update(canonical(&unsigned).as_bytes());
        mac
    }

    /// Adds the signature of job `name`/`id` to its data.
    pub fn sign(&self, name: &str, id: &str, data: &mut Value) {
        let tag = self.mac(name, id, data).finalize().into_bytes();
        let hex: String = tag.iter().map(|b| format!("{b:02x}")).collect();
        if let Some(object) = data.as_object_mut() {
            object.insert(SIGNATURE_FIELD.to_owned(), Value::String(hex));
        }
    }

    /// Checks the signature of job `name`/`id` (in constant time).
    pub fn verify(&self, name: &str, id: &str, data: &Value) -> Result<(), Unsigned> {
        let Some(hex) = data.get(SIGNATURE_FIELD).and_then(Value::as_str) else {
            return Err(Unsigned::Missing);
        };
        let tag = decode_hex(hex).ok_or(Unsigned::Mismatch)?;
        self.mac(name, id, data)
            .verify_slice(&tag)
            .map_err(|_| Unsigned::Mismatch)
    }
}

fn decode_hex(hex: &str) -> Option<Vec<u8>> {
    if hex.len() != 64 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect()
}

/// JSON with objects' keys sorted and no spaces, whatever order the producer wrote them in.
pub fn canonical(value: &Value) -> String {
    let mut out = String::new();
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (k, key) in keys.into_iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(&map[key], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (k, item) in items.iter().enumerate() {
                if k > 0 {
                    out.push(',');
                }
                write_canonical(item, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn hmac_sha256_is_rfc_4231s() {
        // RFC 4231, test case 2.
        let mut mac = HmacSha256::new_from_slice(b"Jefe").unwrap();
        mac.update(b"what do ya want for nothing?");
        let tag: String = mac
            .finalize()
            .into_bytes()
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(
            tag,
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
        );
    }

    #[test]
    fn a_signed_job_verifies_and_any_change_does_not() {
        let secret = QueueSecret::new("s3cret").unwrap();
        let mut data =
            json!({"tool": "exec", "args": {"argv": ["true"]}, "run_id": "R", "attempt": 1});
        secret.sign("exec", "R/a#1", &mut data);
        assert_eq!(secret.verify("exec", "R/a#1", &data), Ok(()));
        // Keys in another order are the same job.
        let reordered: Value = serde_json::from_str(&canonical(&data)).unwrap();
        assert_eq!(secret.verify("exec", "R/a#1", &reordered), Ok(()));
        let mut altered = data.clone();
        altered["args"]["argv"][0] = json!("rm");
        assert_eq!(
            secret.verify("exec", "R/a#1", &altered),
            Err(Unsigned::Mismatch)
        );
        assert_eq!(
            secret.verify("exec", "R/b#1", &data),
            Err(Unsigned::Mismatch)
        );
        assert_eq!(
            secret.verify("http", "R/a#1", &data),
            Err(Unsigned::Mismatch)
        );
        let other = QueueSecret::new("other").unwrap();
        assert_eq!(
            other.verify("exec", "R/a#1", &data),
            Err(Unsigned::Mismatch)
        );
        let mut unsigned = data.clone();
        unsigned.as_object_mut().unwrap().remove(SIGNATURE_FIELD);
        assert_eq!(
            secret.verify("exec", "R/a#1", &unsigned),
            Err(Unsigned::Missing)
        );
        assert!(QueueSecret::new("").is_none());
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_depth() {
        let value: Value =
            serde_json::from_str(r#"{"b": [1, {"d": 1, "c": "é"}], "a": null}"#).unwrap();
        assert_eq!(canonical(&value), r#"{"a":null,"b":[1,{"c":"é","d":1}]}"#);
    }
}
