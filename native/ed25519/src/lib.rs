//! Ed25519 verification for fleet-pipeline's consume path, on ed25519-dalek, under libsodium's
//! rules (`crypto_sign_verify_detached`): a signature either accepts, the other accepts it too.
//!
//! libsodium refuses a public key whose encoding is not canonical (y >= p) or whose point has
//! small order, a signature whose `S` is not below the group order, whose `R` has small order,
//! or whose `R` bytes are not exactly the point it recomputes. `verify_strict` checks `S`, both
//! small orders and compares `R` byte for byte; the key's canonical encoding is checked here,
//! as libsodium's `ge25519_is_canonical` does. `tests/unit/test_ed25519.py` holds the two to
//! the same answers on valid, mutated and edge-case signatures.
//!
//! One call per record, so the key is decoded once (`VerifyKey`) and the GIL is released for
//! the curve arithmetic: a batch still verifies on several threads (`pipeline.envelope.batch`).

use ed25519_dalek::{Signature, VerifyingKey};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

/// Whether a 32-byte point encoding is canonical: its y (the low 255 bits) below 2^255 - 19.
fn is_canonical(s: &[u8; 32]) -> bool {
    !(s[31] & 0x7f == 0x7f && s[1..31].iter().all(|&b| b == 0xff) && s[0] >= 0xed)
}

/// A trusted public key, decoded once. A key libsodium would refuse verifies nothing.
#[pyclass(frozen, module = "fleet_ed25519")]
struct VerifyKey {
    key: Option<VerifyingKey>,
}

#[pymethods]
impl VerifyKey {
    #[new]
    fn new(public: &[u8]) -> PyResult<Self> {
        let bytes: [u8; 32] = public
            .try_into()
            .map_err(|_| PyValueError::new_err("an Ed25519 public key is 32 bytes"))?;
        let key = if is_canonical(&bytes) {
            VerifyingKey::from_bytes(&bytes).ok().filter(|k| !k.is_weak())
        } else {
            None
        };
        Ok(Self { key })
    }

    /// True if `signature` (64 bytes) is this key's over `message`.
    fn verify(&self, py: Python<'_>, signature: &[u8], message: &[u8]) -> bool {
        let Some(key) = self.key else { return false };
        let Ok(sig) = <[u8; 64]>::try_from(signature) else { return false };
        py.allow_threads(|| key.verify_strict(message, &Signature::from_bytes(&sig)).is_ok())
    }
}

#[pymodule]
fn fleet_ed25519(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<VerifyKey>()?;
    Ok(())
}
