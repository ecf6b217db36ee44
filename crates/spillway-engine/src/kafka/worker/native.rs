//! The librdkafka calls a worker makes that rdkafka 0.33 does not wrap, hence this
//! module's unsafe code:
//! - Batched reads ([`Batch`]): `rd_kafka_consume_batch_queue` on the consumer's queue
//!   hands over up to a batch of messages in one call, where `BaseConsumer::poll` takes
//!   one message per call and serves the main queue each time. A busy worker then
//!   processes its messages a batch at a time, so a task's state store is told a
//!   batch's keys before their events are processed (prefetch), as `Driver::run` does
//!   for a file. The messages are librdkafka's (`rd_kafka_message_t`), read in place
//!   through [`Msg`] and destroyed when their [`Batch`] is dropped; a batch borrows its
//!   consumer, so it cannot outlive it. librdkafka serves the rebalance callback inside
//!   the batch call, as inside a poll, and drops messages of a partition fetched before
//!   its last seek (the op version barrier), as a poll does.
//! - Sends to a topic handle ([`Producer::send_output`]): `rd_kafka_produceva` with a handle
//!   taken once per topic, where `BaseProducer::send` copies the topic name into a new
//!   C string and librdkafka looks the topic up by name for every message.

use std::ffi::{c_void, CStr, CString};
use std::marker::PhantomData;
use std::time::Duration;

use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::KafkaError;
use rdkafka::producer::{DefaultProducerContext, Producer as _, ThreadedProducer};
use rdkafka::types::RDKafkaErrorCode;
use rdkafka_sys as sys;

/// A worker's transactional producer with a handle of the topic it sends most to, its
/// output ([`Producer::send_output`]); the handle is released before the producer.
pub(super) struct Producer {
    output: *mut sys::rd_kafka_topic_t,
    inner: ThreadedProducer<DefaultProducerContext>,
}

impl Producer {
    /// `inner` with a handle of topic `output`.
    pub(super) fn new(inner: ThreadedProducer<DefaultProducerContext>, output: &str) -> Producer {
        let name = CString::new(output).expect("topic names have no NUL");
        // SAFETY: the client is valid while `inner` lives; the handle is released in
        // `drop`, before `inner` is.
        let output = unsafe {
            sys::rd_kafka_topic_new(
                inner.client().native_ptr(),
                name.as_ptr(),
                std::ptr::null_mut(),
            )
        };
        assert!(!output.is_null(), "librdkafka refused a handle of topic {name:?}");
        Producer { output, inner }
    }

    /// The producer, for everything but [`Producer::send_output`].
    pub(super) fn inner(&self) -> &ThreadedProducer<DefaultProducerContext> {
        &self.inner
    }

    /// Sends one message without headers to partition `partition` of the output topic,
    /// with timestamp `ts` (`None`: now). librdkafka copies key and value. The error is
    /// librdkafka's refusal (a full queue, a doomed transaction), as `BaseProducer::send`
    /// gives it.
    pub(super) fn send_output(
        &self,
        key: &[u8],
        partition: i32,
        payload: &[u8],
        ts: Option<i64>,
    ) -> Result<(), KafkaError> {
        let vu = |vtype, u| sys::rd_kafka_vu_t { vtype, u };
        use sys::rd_kafka_vtype_t as V;
        let mem = |b: &[u8]| sys::rd_kafka_vu_s__bindgen_ty_1 {
            mem: sys::rd_kafka_vu_s__bindgen_ty_1__bindgen_ty_1 {
                ptr: b.as_ptr() as *mut c_void,
                size: b.len(),
            },
        };
        let vus = [
            vu(V::RD_KAFKA_VTYPE_RKT, sys::rd_kafka_vu_s__bindgen_ty_1 { rkt: self.output }),
            vu(V::RD_KAFKA_VTYPE_PARTITION, sys::rd_kafka_vu_s__bindgen_ty_1 { i32_: partition }),
            vu(
                V::RD_KAFKA_VTYPE_MSGFLAGS,
                sys::rd_kafka_vu_s__bindgen_ty_1 { i: sys::RD_KAFKA_MSG_F_COPY },
            ),
            vu(V::RD_KAFKA_VTYPE_VALUE, mem(payload)),
            vu(V::RD_KAFKA_VTYPE_KEY, mem(key)),
            vu(
                V::RD_KAFKA_VTYPE_TIMESTAMP,
                sys::rd_kafka_vu_s__bindgen_ty_1 { i64_: ts.unwrap_or(0) },
            ),
        ];
        // SAFETY: the client and the topic handle are valid while `self` lives; key and
        // value are copied (RD_KAFKA_MSG_F_COPY) before the call returns; an error
        // object returned is destroyed here, once.
        unsafe {
            let e =
                sys::rd_kafka_produceva(self.inner.client().native_ptr(), vus.as_ptr(), vus.len());
            if e.is_null() {
                return Ok(());
            }
            let code = sys::rd_kafka_error_code(e);
            sys::rd_kafka_error_destroy(e);
            Err(KafkaError::MessageProduction(code.into()))
        }
    }
}

impl Drop for Producer {
    fn drop(&mut self) {
        // SAFETY: the handle came from `rd_kafka_topic_new` and is released once, before
        // the producer (`inner` is dropped after this).
        unsafe { sys::rd_kafka_topic_destroy(self.output) };
    }
}

/// Messages taken from a consumer by one [`Batch::poll`], destroyed when it is dropped.
pub(super) struct Batch<'c> {
    msgs: Vec<*mut sys::rd_kafka_message_t>,
    _consumer: PhantomData<&'c ()>,
}

impl<'c> Batch<'c> {
    /// Up to `max` messages (or consumer errors) of `consumer`, in the order it delivers
    /// them: waits up to `timeout` for the first, then takes what is already there
    /// (it never waits to fill the batch). Also serves the client's main queue (logs,
    /// client errors), as `BaseConsumer::poll` does.
    pub(super) fn poll<C: ConsumerContext>(
        consumer: &'c BaseConsumer<C>,
        timeout: Duration,
        max: usize,
    ) -> Batch<'c> {
        let mut msgs: Vec<*mut sys::rd_kafka_message_t> = Vec::with_capacity(max);
        let client = consumer.client().native_ptr();
        let ms = timeout.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: the client pointer is valid while `consumer` lives, and the queue
        // handle is released before this returns. librdkafka writes at most the given
        // count of message pointers at the given place, inside the vector's capacity,
        // and returns how many (or -1 on an error, when it wrote none).
        unsafe {
            sys::rd_kafka_poll(client, 0);
            let queue = sys::rd_kafka_queue_get_consumer(client);
            assert!(!queue.is_null(), "a consumer with a group has a consumer queue");
            let mut n = sys::rd_kafka_consume_batch_queue(queue, 0, msgs.as_mut_ptr(), max);
            if n <= 0 && ms > 0 && max > 0 {
                // The batch call waits until it has `max` messages or the time is up:
                // wait for one, then take what came with it.
                n = sys::rd_kafka_consume_batch_queue(queue, ms, msgs.as_mut_ptr(), 1);
                if n == 1 && max > 1 {
                    let more = sys::rd_kafka_consume_batch_queue(
                        queue,
                        0,
                        msgs.as_mut_ptr().add(1),
                        max - 1,
                    );
                    n += more.max(0);
                }
            }
            sys::rd_kafka_queue_destroy(queue);
            msgs.set_len(n.max(0) as usize);
        }
        Batch { msgs, _consumer: PhantomData }
    }

    /// Messages in the batch.
    pub(super) fn len(&self) -> usize {
        self.msgs.len()
    }

    /// The `i`th message.
    pub(super) fn get(&self, i: usize) -> Msg<'_> {
        // SAFETY: every pointer is a live message until the batch is dropped.
        Msg { m: unsafe { &*self.msgs[i] } }
    }
}

impl Drop for Batch<'_> {
    fn drop(&mut self) {
        for &m in &self.msgs {
            // SAFETY: each message came from librdkafka and is destroyed once.
            unsafe { sys::rd_kafka_message_destroy(m) };
        }
    }
}

/// One message of a [`Batch`], read in place.
#[derive(Clone, Copy)]
pub(super) struct Msg<'b> {
    m: &'b sys::rd_kafka_message_t,
}

impl<'b> Msg<'b> {
    /// The consumer error this message carries instead of data, if any.
    pub(super) fn error(&self) -> Option<KafkaError> {
        let err = self.m.err;
        if err == sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return None;
        }
        let code: RDKafkaErrorCode = err.into();
        Some(if err == sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR__PARTITION_EOF {
            KafkaError::PartitionEOF(self.m.partition)
        } else {
            KafkaError::MessageConsumption(code)
        })
    }

    /// The message's topic.
    pub(super) fn topic(&self) -> &'b str {
        if self.m.rkt.is_null() {
            return "";
        }
        // SAFETY: a message's topic handle and its NUL-terminated name live as long as
        // the message.
        let name = unsafe { CStr::from_ptr(sys::rd_kafka_topic_name(self.m.rkt)) };
        name.to_str().unwrap_or("")
    }

    /// The message's partition.
    pub(super) fn partition(&self) -> i32 {
        self.m.partition
    }

    /// The message's offset.
    pub(super) fn offset(&self) -> i64 {
        self.m.offset
    }

    /// The message's value.
    pub(super) fn payload(&self) -> Option<&'b [u8]> {
        // SAFETY: the value is `len` bytes owned by the message.
        unsafe { bytes(self.m.payload, self.m.len) }
    }

    /// The message's key.
    pub(super) fn key(&self) -> Option<&'b [u8]> {
        // SAFETY: the key is `key_len` bytes owned by the message.
        unsafe { bytes(self.m.key, self.m.key_len) }
    }

    /// The message's timestamp in Unix milliseconds (`None` without one).
    pub(super) fn timestamp_ms(&self) -> Option<i64> {
        let mut kind = sys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE;
        // SAFETY: the message is live; `kind` is a local.
        let ts = unsafe { sys::rd_kafka_message_timestamp(self.m, &mut kind) };
        (kind != sys::rd_kafka_timestamp_type_t::RD_KAFKA_TIMESTAMP_NOT_AVAILABLE && ts != -1)
            .then_some(ts)
    }

    /// The value of the first header named `name`, if it has one.
    pub(super) fn header(&self, name: &CStr) -> Option<&'b [u8]> {
        let mut hdrs: *mut sys::rd_kafka_headers_t = std::ptr::null_mut();
        let (mut value, mut size): (*const c_void, usize) = (std::ptr::null(), 0);
        // SAFETY: the message is live; librdkafka parses its headers once and keeps them
        // with the message, so the value it points into lives as long as the message.
        unsafe {
            if sys::rd_kafka_message_headers(self.m, &mut hdrs)
                != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
                || sys::rd_kafka_header_get(hdrs, 0, name.as_ptr(), &mut value, &mut size)
                    != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR
            {
                return None;
            }
            bytes(value.cast_mut(), size)
        }
    }
}

/// `len` bytes at `ptr`, `None` for a null pointer.
///
/// # Safety
/// A non-null `ptr` points to `len` bytes valid for `'a`.
unsafe fn bytes<'a>(ptr: *mut c_void, len: usize) -> Option<&'a [u8]> {
    // SAFETY: per the function's contract.
    (!ptr.is_null()).then(|| unsafe { std::slice::from_raw_parts(ptr as *const u8, len) })
}
