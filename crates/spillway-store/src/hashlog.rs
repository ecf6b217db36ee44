//! TEMPORARY STUB — being replaced by the real hybrid-log store.
#![allow(missing_docs, unused)]
use crate::*;
#[derive(Clone, Debug, Default)]
pub struct HashLogOptions {}
pub struct HashLogStore;
impl HashLogStore {
    pub fn open(opts: StoreOptions, h: HashLogOptions) -> Result<Self> { Err(Error::AddressSpaceExhausted) }
}
impl StateStore for HashLogStore {
    fn name(&self) -> &'static str { "hashlog" }
    fn capabilities(&self) -> Capabilities { unimplemented!() }
    fn namespace(&self, name: &str) -> Result<Ns> { unimplemented!() }
    fn checkpoint_seq(&self) -> u64 { 0 }
    fn get_into(&mut self, ns: Ns, key: &[u8], out: &mut Vec<u8>) -> Result<bool> { unimplemented!() }
    fn put(&mut self, ns: Ns, key: &[u8], value: &[u8]) -> Result<()> { unimplemented!() }
    fn merge(&mut self, ns: Ns, key: &[u8], operand: &[u8]) -> Result<()> { unimplemented!() }
    fn delete(&mut self, ns: Ns, key: &[u8]) -> Result<()> { unimplemented!() }
    fn rmw(&mut self, ns: Ns, key: &[u8], f: &mut RmwFn<'_>) -> Result<()> { unimplemented!() }
    fn scan_prefix(&mut self, ns: Ns, prefix: &[u8], visit: &mut Visitor<'_>) -> Result<()> { unimplemented!() }
    fn scan_range(&mut self, ns: Ns, s: std::ops::Bound<&[u8]>, e: std::ops::Bound<&[u8]>, visit: &mut Visitor<'_>) -> Result<()> { unimplemented!() }
    fn checkpoint(&mut self) -> Result<CheckpointInfo> { unimplemented!() }
    fn stats(&self) -> StoreStats { unimplemented!() }
}
