//! `spillway kafka status`: a consumer group's members, what each owns, and each
//! partition's committed offset, end and lag, read without disturbing the group.
//!
//! - **Members** come from the group coordinator's description of the group
//!   (`rd_kafka_list_groups`, what rdkafka's `fetch_group_list` calls: Kafka's ListGroups
//!   and DescribeGroups; read directly, see `describe_group`): member id, client id and
//!   host, and the member's assignment, the ConsumerProtocol `Assignment` bytes the
//!   group leader chose ([`decode_assignment`]). The description has no field for a
//!   static member's `group.instance.id` in this client, so it is read from the member id
//!   Kafka assigned: the coordinator names a static member `INSTANCE-UUID` and any other
//!   `CLIENTID-UUID` ([`instance_id`]); a static member whose instance id equals its
//!   client id is shown without one.
//! - **Committed offsets** are fetched (OffsetFetch) by a consumer created with the
//!   group's `group.id` that never subscribes and never assigns: it never joins the group
//!   and commits nothing, so a running group does not notice it. It reads with
//!   `isolation.level=read_uncommitted` so that the broker answers at once with the
//!   offsets committed so far, where a `read_committed` client would wait out a worker's
//!   open transaction (KIP-447's stable offsets). The partitions asked about are every
//!   partition of every topic in the cluster (not the internal `__` topics) plus the
//!   assigned ones; those with a committed offset or an owner are reported.
//! - **Ends**: `end` is the partition's last stable offset (the end a `read_committed`
//!   reader such as a worker reads to: offsets of open transactions are beyond it),
//!   `high_watermark` the end including them.
//! - **Lag** is `end - committed` in offsets. Offsets also number transaction markers
//!   (each committed or aborted transaction leaves one) and aborted messages, which no
//!   `read_committed` reader is given, so a partition that a worker read to its end
//!   still ends one marker after its committed offset. A partition whose lag is at most
//!   [`PEEK_MAX`] offsets is therefore read from its committed offset (by a separate
//!   consumer that assigns itself the partitions under another group id and commits
//!   nothing): if no message is there before the end, its lag is 0. A partition left
//!   unresolved within [`PEEK_TIMEOUT`] keeps its offset lag.
//!
//! An unknown group is reported as state `Dead` with no members and no offsets
//! ([`GroupStatus::exists`] false). An unreachable broker fails within seconds
//! ([`super::check_reachable`]).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::{Offset, TopicPartitionList};

use super::{check_reachable, client_config, kerr, CALL_TIMEOUT};
use crate::error::{Error, Result};

/// A partition whose end is at most this many offsets past its committed offset is read
/// to tell markers from messages (module docs, "Lag").
pub const PEEK_MAX: i64 = 64;
/// How long that read may take in all.
pub const PEEK_TIMEOUT: Duration = Duration::from_secs(5);

/// What `end` means in [`PartitionStatus`].
pub const END_IS: &str = "last stable offset (the end for read_committed readers)";

/// A consumer group's state.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct GroupStatus {
    /// The group id.
    pub group: String,
    /// Whether the group exists: it has members or committed offsets.
    pub exists: bool,
    /// The coordinator's state of the group (`Stable`, `Empty`, `PreparingRebalance`,
    /// `CompletingRebalance`; `Dead` when there is no such group).
    pub state: String,
    /// The group's protocol type (`consumer` for consumer groups; empty when unknown).
    pub protocol_type: String,
    /// The assignor the group chose (`range`, `cooperative-sticky`, ...).
    pub protocol: String,
    /// What `end` is: [`END_IS`].
    pub end_is: String,
    /// The members, by member id.
    pub members: Vec<Member>,
    /// Every partition the group has a committed offset for or assigned, by topic and
    /// partition.
    pub partitions: Vec<PartitionStatus>,
}

/// A member of a group.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Member {
    /// The member id the coordinator assigned.
    pub member_id: String,
    /// The client's `client.id`.
    pub client_id: String,
    /// The client's host as the broker saw it (e.g. `/127.0.0.1`).
    pub host: String,
    /// The static member's `group.instance.id` (a worker's `--worker-id`), read from
    /// the member id (module docs); `None` for a dynamic member.
    pub group_instance_id: Option<String>,
    /// The partitions the member owns, by topic.
    pub assignment: Vec<TopicPartitions>,
    /// Why the assignment could not be read (not a consumer group, or malformed bytes);
    /// `None` when it was.
    pub assignment_error: Option<String>,
}

impl Member {
    /// How the member is named in the table: its instance id, else its member id.
    pub fn name(&self) -> &str {
        self.group_instance_id.as_deref().unwrap_or(&self.member_id)
    }
}

/// Partitions of one topic.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TopicPartitions {
    /// The topic.
    pub topic: String,
    /// Its partitions, as the assignment lists them.
    pub partitions: Vec<i32>,
}

/// One partition's offsets.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PartitionStatus {
    /// The topic.
    pub topic: String,
    /// The partition.
    pub partition: i32,
    /// The member id of the member that owns it (`None`: no member does).
    pub owner: Option<String>,
    /// The group's committed offset, the next offset to read (`None`: none committed).
    pub committed: Option<i64>,
    /// The partition's last stable offset ([`END_IS`]).
    pub end: i64,
    /// The partition's high watermark (past open transactions' messages).
    pub high_watermark: i64,
    /// Offsets from `committed` to `end`, 0 when they hold no message a
    /// `read_committed` reader is given (module docs, "Lag"); `None` without a committed
    /// offset.
    pub lag: Option<i64>,
}

/// A ConsumerProtocol `Assignment` (versions 0 to 3 share one layout: `version: int16`,
/// `[topic: string, [partition: int32]]`, `user_data: nullable bytes`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Assignment {
    /// The layout version the member wrote.
    pub version: i16,
    /// The assigned partitions, by topic.
    pub partitions: Vec<TopicPartitions>,
    /// The assignor's user data (`None`: null or absent).
    pub user_data: Option<Vec<u8>>,
}

/// A bounds-checked big-endian reader over Kafka protocol bytes.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> std::result::Result<&'a [u8], String> {
        let rest = self.b.len() - self.at;
        if n > rest {
            return Err(format!(
                "{what} at byte {} needs {n} bytes, only {rest} left of {}",
                self.at,
                self.b.len()
            ));
        }
        let s = &self.b[self.at..self.at + n];
        self.at += n;
        Ok(s)
    }

    fn i16(&mut self, what: &str) -> std::result::Result<i16, String> {
        let s = self.take(2, what)?;
        Ok(i16::from_be_bytes([s[0], s[1]]))
    }

    fn i32(&mut self, what: &str) -> std::result::Result<i32, String> {
        let s = self.take(4, what)?;
        Ok(i32::from_be_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn left(&self) -> usize {
        self.b.len() - self.at
    }

    /// An array count, checked against the bytes left (each element takes at least
    /// `min` bytes), so a corrupt count allocates nothing.
    fn count(&mut self, min: usize, what: &str) -> std::result::Result<usize, String> {
        let at = self.at;
        let n = self.i32(what)?;
        if n < 0 {
            return Err(format!("{what} at byte {at} is {n}, not a count"));
        }
        let n = n as usize;
        if n.saturating_mul(min) > self.left() {
            return Err(format!(
                "{what} at byte {at} is {n}, more than the {} bytes left can hold",
                self.left()
            ));
        }
        Ok(n)
    }
}

/// Decodes a member's ConsumerProtocol `Assignment` bytes. Empty bytes (a member whose
/// assignment is not made yet) are an empty assignment. A version above 3 is read with
/// version 3's layout, as Kafka's own clients read one (fields a later version adds come
/// after it); a negative version, a count or length past the end, a negative count or a
/// topic name that is not UTF-8 is an error naming the byte.
pub fn decode_assignment(bytes: &[u8]) -> std::result::Result<Assignment, String> {
    if bytes.is_empty() {
        return Ok(Assignment { version: 0, partitions: Vec::new(), user_data: None });
    }
    let mut r = Reader { b: bytes, at: 0 };
    let version = r.i16("the version")?;
    if version < 0 {
        return Err(format!("version {version} is not a ConsumerProtocol assignment version"));
    }
    // A topic entry is at least a string length and a partition count.
    let topics = r.count(6, "the topic count")?;
    let mut partitions = Vec::with_capacity(topics);
    for _ in 0..topics {
        let at = r.at;
        let len = r.i16("a topic name's length")?;
        if len < 0 {
            return Err(format!("a topic name's length at byte {at} is {len}"));
        }
        let name = r.take(len as usize, "a topic name")?;
        let topic = std::str::from_utf8(name)
            .map_err(|_| format!("the topic name at byte {} is not UTF-8", at + 2))?
            .to_string();
        let n = r.count(4, "a partition count")?;
        let mut ps = Vec::with_capacity(n);
        for _ in 0..n {
            ps.push(r.i32("a partition")?);
        }
        partitions.push(TopicPartitions { topic, partitions: ps });
    }
    // User data: nullable bytes; some writers leave it out.
    let user_data = if r.left() == 0 {
        None
    } else {
        let at = r.at;
        match r.i32("the user data's length")? {
            -1 => None,
            n if n < 0 => return Err(format!("the user data's length at byte {at} is {n}")),
            n => Some(r.take(n as usize, "the user data")?.to_vec()),
        }
    };
    if version <= 3 && r.left() > 0 {
        return Err(format!(
            "{} bytes after the end of a version {version} assignment ({} bytes)",
            r.left(),
            bytes.len()
        ));
    }
    Ok(Assignment { version, partitions, user_data })
}

/// The `group.instance.id` a member id shows: Kafka's coordinator names a member
/// `PREFIX-UUID`, the prefix being the static member's instance id or else its client
/// id. `None` when the prefix is the client id, or the id has no such form.
pub fn instance_id(member_id: &str, client_id: &str) -> Option<String> {
    let (prefix, uuid) = member_id.split_at_checked(member_id.len().checked_sub(37)?)?;
    let uuid = uuid.strip_prefix('-')?;
    let is_uuid = uuid.len() == 36
        && uuid.char_indices().all(|(i, c)| {
            if matches!(i, 8 | 13 | 18 | 23) {
                c == '-'
            } else {
                c.is_ascii_hexdigit()
            }
        });
    (is_uuid && !prefix.is_empty() && prefix != client_id).then(|| prefix.to_string())
}

/// Reads group `group`'s status from `brokers` (module docs). Joins nothing, commits
/// nothing.
pub fn group_status(brokers: &str, group: &str) -> Result<GroupStatus> {
    if group.is_empty() {
        return Err(Error::Config("--group: a group id cannot be empty".into()));
    }
    check_reachable(brokers)?;
    let b = brokers;
    // Never subscribes or assigns: it only asks the coordinator.
    let offsets: BaseConsumer = client_config(b)
        .set("group.id", group)
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("isolation.level", "read_uncommitted")
        .create()
        .map_err(kerr(b, "creating a consumer"))?;
    let info = describe_group(&offsets, b, group)?;
    let (state, protocol_type, protocol) = match &info {
        Some(g) => (g.state.clone(), g.protocol_type.clone(), g.protocol.clone()),
        None => ("Dead".to_string(), String::new(), String::new()),
    };
    let mut members = Vec::new();
    for m in info.as_ref().map(|g| g.members.as_slice()).unwrap_or_default() {
        let (assignment, assignment_error) = if protocol_type == "consumer" {
            match decode_assignment(&m.assignment) {
                Ok(a) => (a.partitions, None),
                Err(e) => (Vec::new(), Some(format!("malformed assignment: {e}"))),
            }
        } else {
            (Vec::new(), Some(format!("protocol type {protocol_type:?} is not \"consumer\"")))
        };
        members.push(Member {
            group_instance_id: instance_id(&m.member_id, &m.client_id),
            member_id: m.member_id.clone(),
            client_id: m.client_id.clone(),
            host: m.host.clone(),
            assignment,
            assignment_error,
        });
    }
    members.sort_by(|x, y| x.member_id.cmp(&y.member_id));

    let mut owner: BTreeMap<(String, i32), String> = BTreeMap::new();
    for m in &members {
        for tp in &m.assignment {
            for &p in &tp.partitions {
                owner.insert((tp.topic.clone(), p), m.member_id.clone());
            }
        }
    }
    // Every partition of the cluster's topics, and the assigned ones.
    let md = offsets
        .fetch_metadata(None, CALL_TIMEOUT)
        .map_err(kerr(b, "reading metadata; is a broker running there?"))?;
    let mut asked: BTreeSet<(String, i32)> = owner.keys().cloned().collect();
    for t in md.topics() {
        if t.name().starts_with("__") || t.error().is_some() {
            continue;
        }
        asked.extend(t.partitions().iter().map(|p| (t.name().to_string(), p.id())));
    }
    let mut committed: BTreeMap<(String, i32), i64> = BTreeMap::new();
    if !asked.is_empty() {
        let mut tpl = TopicPartitionList::new();
        for (t, p) in &asked {
            tpl.add_partition(t, *p);
        }
        let got = offsets
            .committed_offsets(tpl, CALL_TIMEOUT)
            .map_err(kerr(b, &format!("reading group {group}'s committed offsets")))?;
        for el in got.elements() {
            if let Err(e) = el.error() {
                return Err(kerr(
                    b,
                    &format!(
                        "reading group {group}'s committed offset of partition {} of {}",
                        el.partition(),
                        el.topic()
                    ),
                )(e));
            }
            if let Offset::Offset(o) = el.offset() {
                committed.insert((el.topic().to_string(), el.partition()), o);
            }
        }
    }

    // Ends: a read_committed client's end is the last stable offset.
    let ends: BaseConsumer = client_config(b)
        .set("isolation.level", "read_committed")
        .create()
        .map_err(kerr(b, "creating a consumer"))?;
    let shown: BTreeSet<(String, i32)> = committed.keys().chain(owner.keys()).cloned().collect();
    let mut partitions = Vec::with_capacity(shown.len());
    for (t, p) in shown {
        let what = format!("reading the offsets of partition {p} of {t}");
        let (_, end) = ends.fetch_watermarks(&t, p, CALL_TIMEOUT).map_err(kerr(b, &what))?;
        let (_, hw) = offsets.fetch_watermarks(&t, p, CALL_TIMEOUT).map_err(kerr(b, &what))?;
        let c = committed.get(&(t.clone(), p)).copied();
        partitions.push(PartitionStatus {
            owner: owner.get(&(t.clone(), p)).cloned(),
            committed: c,
            end,
            high_watermark: hw,
            lag: c.map(|c| (end - c).max(0)),
            topic: t,
            partition: p,
        });
    }
    resolve_markers(b, &mut partitions)?;

    let exists = info.as_ref().is_some_and(|g| g.state != "Dead" || !g.members.is_empty())
        || !committed.is_empty();
    Ok(GroupStatus {
        group: group.to_string(),
        exists,
        state: if exists { state } else { "Dead".to_string() },
        protocol_type,
        protocol,
        end_is: END_IS.to_string(),
        members,
        partitions,
    })
}

/// A group as the coordinator describes it, copied out of librdkafka's list.
struct GroupDescription {
    state: String,
    protocol_type: String,
    protocol: String,
    members: Vec<MemberDescription>,
}

struct MemberDescription {
    member_id: String,
    client_id: String,
    host: String,
    assignment: Vec<u8>,
}

/// Frees a group list however the reading of it ends.
struct GroupList(*const rdkafka_sys::rd_kafka_group_list);

impl Drop for GroupList {
    #[allow(unsafe_code)]
    fn drop(&mut self) {
        if !self.0.is_null() {
            // SAFETY: the list came from rd_kafka_list_groups and is freed once, here.
            unsafe { rdkafka_sys::rd_kafka_group_list_destroy(self.0) }
        }
    }
}

/// Describes `group` (`rd_kafka_list_groups`: ListGroups, then DescribeGroups of the
/// group if it is listed); `None` when no broker lists it or the coordinator says there
/// is no such group. rdkafka 0.33's `fetch_group_list` wraps the same call, but its
/// `GroupInfo::members` builds a slice from the list's null member pointer when a group
/// has no members (an empty group: undefined behaviour, which debug builds abort on), so
/// the list is read here, every pointer checked, and copied into owned values.
#[allow(unsafe_code)]
fn describe_group(c: &BaseConsumer, b: &str, group: &str) -> Result<Option<GroupDescription>> {
    use rdkafka::types::RDKafkaErrorCode;
    use rdkafka_sys::rd_kafka_resp_err_t as RespErr;
    use std::ffi::{c_char, CStr, CString};

    /// Owned text of a C string; NULL is empty.
    ///
    /// SAFETY (caller): `p` is NULL or a NUL-terminated string that outlives the call.
    unsafe fn text(p: *const c_char) -> String {
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: see above.
            unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
        }
    }
    /// Owned copy of `n` bytes at `p`; NULL or a size below 1 is empty.
    ///
    /// SAFETY (caller): a non-NULL `p` points to `n` readable bytes.
    unsafe fn bytes(p: *const std::ffi::c_void, n: std::ffi::c_int) -> Vec<u8> {
        if p.is_null() || n <= 0 {
            Vec::new()
        } else {
            // SAFETY: see above.
            unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n as usize) }.to_vec()
        }
    }

    let name = CString::new(group)
        .map_err(|_| Error::Config(format!("--group {group:?}: a group id has no NUL byte")))?;
    let mut list: *const rdkafka_sys::rd_kafka_group_list = std::ptr::null();
    let timeout = std::ffi::c_int::try_from(CALL_TIMEOUT.as_millis()).unwrap_or(i32::MAX);
    // SAFETY: the client pointer is valid while `c` lives, the name is NUL-terminated and
    // `list` is a local out-pointer.
    let err = unsafe {
        rdkafka_sys::rd_kafka_list_groups(
            c.client().native_ptr(),
            name.as_ptr(),
            &mut list,
            timeout,
        )
    };
    let list = GroupList(list);
    if err != RespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
        return Err(Error::Kafka(format!(
            "describing group {group} (brokers {b}): {}",
            RDKafkaErrorCode::from(err)
        )));
    }
    if list.0.is_null() {
        return Ok(None);
    }
    // SAFETY: librdkafka filled the list: `groups` points to `group_cnt` group infos,
    // each with `members` pointing to `member_cnt` members (NULL when there are none), and
    // every string is NUL-terminated or NULL. All of it lives until `list` is dropped, and
    // only owned copies leave this block.
    unsafe {
        let l = &*list.0;
        if l.groups.is_null() || l.group_cnt <= 0 {
            return Ok(None);
        }
        for g in std::slice::from_raw_parts(l.groups, l.group_cnt as usize) {
            if text(g.group) != group {
                continue;
            }
            if g.err == RespErr::RD_KAFKA_RESP_ERR_GROUP_ID_NOT_FOUND {
                return Ok(None);
            }
            if g.err != RespErr::RD_KAFKA_RESP_ERR_NO_ERROR {
                return Err(Error::Kafka(format!(
                    "describing group {group} (brokers {b}): {}",
                    RDKafkaErrorCode::from(g.err)
                )));
            }
            let mut members = Vec::new();
            if !g.members.is_null() && g.member_cnt > 0 {
                for m in std::slice::from_raw_parts(g.members, g.member_cnt as usize) {
                    members.push(MemberDescription {
                        member_id: text(m.member_id),
                        client_id: text(m.client_id),
                        host: text(m.client_host),
                        assignment: bytes(m.member_assignment, m.member_assignment_size),
                    });
                }
            }
            return Ok(Some(GroupDescription {
                state: text(g.state),
                protocol_type: text(g.protocol_type),
                protocol: text(g.protocol),
                members,
            }));
        }
    }
    Ok(None)
}

/// Sets the lag of partitions whose few offsets before the end hold no readable message
/// to 0 (module docs, "Lag"): reads them from the committed offset with a
/// `read_committed` consumer of its own (assigned, under the group id
/// `spillway-status`, committing nothing) until each gave a message or its position
/// reached the end, for at most [`PEEK_TIMEOUT`].
fn resolve_markers(b: &str, partitions: &mut [PartitionStatus]) -> Result<()> {
    let mut open: BTreeMap<(String, i32), (i64, usize)> = BTreeMap::new();
    let mut tpl = TopicPartitionList::new();
    for (i, ps) in partitions.iter().enumerate() {
        if let (Some(c), Some(lag)) = (ps.committed, ps.lag) {
            if lag > 0 && lag <= PEEK_MAX {
                tpl.add_partition_offset(&ps.topic, ps.partition, Offset::Offset(c))
                    .map_err(kerr(b, "listing partitions to read"))?;
                open.insert((ps.topic.clone(), ps.partition), (ps.end, i));
            }
        }
    }
    if open.is_empty() {
        return Ok(());
    }
    let peek: BaseConsumer = client_config(b)
        .set("group.id", "spillway-status")
        .set("enable.auto.commit", "false")
        .set("enable.auto.offset.store", "false")
        .set("enable.partition.eof", "false")
        .set("isolation.level", "read_committed")
        .create()
        .map_err(kerr(b, "creating a consumer"))?;
    peek.assign(&tpl).map_err(kerr(b, "assigning the partitions to read"))?;
    let deadline = Instant::now() + PEEK_TIMEOUT;
    while !open.is_empty() && Instant::now() < deadline {
        if let Some(Ok(m)) = peek.poll(Duration::from_millis(50)) {
            // A message before the end: the lag is real; it stays as it is.
            let k = (m.topic().to_string(), m.partition());
            if open.get(&k).is_some_and(|&(end, _)| m.offset() < end) {
                open.remove(&k);
            }
        }
        // Errors of poll (a transient fetch error) leave the partitions open: bounded.
        let pos = peek.position().map_err(kerr(b, "reading positions"))?;
        for el in pos.elements() {
            let k = (el.topic().to_string(), el.partition());
            if let (Some(&(end, i)), Offset::Offset(o)) = (open.get(&k), el.offset()) {
                if o >= end {
                    partitions[i].lag = Some(0);
                    open.remove(&k);
                }
            }
        }
    }
    Ok(())
}

/// The table `spillway kafka status` prints.
pub fn render_table(s: &GroupStatus) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    if !s.exists {
        let _ = writeln!(
            out,
            "group {}: no such group (state Dead: no members and no committed offsets)",
            s.group
        );
        return out;
    }
    let proto = match (s.protocol_type.as_str(), s.protocol.as_str()) {
        ("", _) => String::new(),
        (t, "") => format!(", protocol {t}"),
        (t, p) => format!(", protocol {t}/{p}"),
    };
    let _ = writeln!(out, "group {}: {}, {} members{proto}", s.group, s.state, s.members.len());
    if !s.members.is_empty() {
        let mut rows =
            vec![["MEMBER", "INSTANCE", "CLIENT", "HOST", "PARTITIONS"].map(String::from)];
        for m in &s.members {
            let owns = match &m.assignment_error {
                Some(e) => format!("({e})"),
                None if m.assignment.is_empty() => "-".to_string(),
                None => m
                    .assignment
                    .iter()
                    .map(|tp| {
                        let ps: Vec<String> = tp.partitions.iter().map(i32::to_string).collect();
                        format!("{}[{}]", tp.topic, ps.join(","))
                    })
                    .collect::<Vec<_>>()
                    .join(" "),
            };
            rows.push([
                m.member_id.clone(),
                m.group_instance_id.clone().unwrap_or_else(|| "-".into()),
                m.client_id.clone(),
                m.host.clone(),
                owns,
            ]);
        }
        out.push('\n');
        table(&mut out, &rows, &[false; 5]);
    }
    if !s.partitions.is_empty() {
        let name: BTreeMap<&str, &str> =
            s.members.iter().map(|m| (m.member_id.as_str(), m.name())).collect();
        let opt = |o: Option<i64>| o.map_or_else(|| "-".to_string(), |v| v.to_string());
        let mut rows = vec![["TOPIC", "PARTITION", "OWNER", "COMMITTED", "END", "LAG"]
            .map(String::from)
            .to_vec()];
        for p in &s.partitions {
            let owner = p.owner.as_deref().map_or("-", |o| name.get(o).copied().unwrap_or(o));
            let mut end = p.end.to_string();
            if p.high_watermark != p.end {
                end.push_str(&format!(" (hw {})", p.high_watermark));
            }
            rows.push(vec![
                p.topic.clone(),
                p.partition.to_string(),
                owner.to_string(),
                opt(p.committed),
                end,
                opt(p.lag),
            ]);
        }
        out.push('\n');
        table(&mut out, &rows, &[false, true, false, true, true, true]);
        let _ = writeln!(
            out,
            "\nEND: {END_IS}; LAG: offsets from COMMITTED to END, 0 when they hold only \
             transaction markers or aborted messages"
        );
    } else {
        let _ = writeln!(out, "\nno committed offsets and no assigned partitions");
    }
    out
}

/// Appends `rows` as columns padded to their widest cell (`right`: right-aligned).
fn table<R: AsRef<[String]>>(out: &mut String, rows: &[R], right: &[bool]) {
    let cols = right.len();
    let mut w = vec![0; cols];
    for r in rows {
        for (i, c) in r.as_ref().iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    for r in rows {
        let mut line = String::new();
        for (i, c) in r.as_ref().iter().enumerate() {
            let pad = " ".repeat(w[i] - c.chars().count());
            if i > 0 {
                line.push_str("  ");
            }
            if right[i] {
                line.push_str(&pad);
                line.push_str(c);
            } else {
                line.push_str(c);
                if i + 1 < cols {
                    line.push_str(&pad);
                }
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// ConsumerProtocol bytes: version, topics with partitions, optional user data.
    fn assignment(version: i16, topics: &[(&str, &[i32])], user: Option<Option<&[u8]>>) -> Vec<u8> {
        let mut b = version.to_be_bytes().to_vec();
        b.extend((topics.len() as i32).to_be_bytes());
        for (t, ps) in topics {
            b.extend((t.len() as i16).to_be_bytes());
            b.extend(t.as_bytes());
            b.extend((ps.len() as i32).to_be_bytes());
            for p in *ps {
                b.extend(p.to_be_bytes());
            }
        }
        match user {
            None => {}
            Some(None) => b.extend((-1i32).to_be_bytes()),
            Some(Some(u)) => {
                b.extend((u.len() as i32).to_be_bytes());
                b.extend(u);
            }
        }
        b
    }

    fn tp(topic: &str, partitions: &[i32]) -> TopicPartitions {
        TopicPartitions { topic: topic.into(), partitions: partitions.to_vec() }
    }

    #[test]
    fn assignments_decode() {
        let b = assignment(0, &[("pay", &[0, 3]), ("out.reply", &[1])], Some(None));
        let a = decode_assignment(&b).unwrap();
        assert_eq!(a.version, 0);
        assert_eq!(a.partitions, vec![tp("pay", &[0, 3]), tp("out.reply", &[1])]);
        assert_eq!(a.user_data, None);
        // User data kept; absent user data; no topics; empty bytes.
        let a = decode_assignment(&assignment(3, &[("t", &[7])], Some(Some(b"xy")))).unwrap();
        assert_eq!((a.version, a.user_data.as_deref()), (3, Some(&b"xy"[..])));
        let a = decode_assignment(&assignment(1, &[("t", &[])], None)).unwrap();
        assert_eq!(a.partitions, vec![tp("t", &[])]);
        assert!(decode_assignment(&assignment(0, &[], Some(None))).unwrap().partitions.is_empty());
        assert_eq!(decode_assignment(&[]).unwrap().partitions, vec![]);
        // A later version is read with version 3's layout; what it adds is ignored.
        let mut b = assignment(9, &[("t", &[1, 2])], Some(Some(b"u")));
        b.extend([0, 0, 0, 42]);
        let a = decode_assignment(&b).unwrap();
        assert_eq!((a.version, a.partitions), (9, vec![tp("t", &[1, 2])]));
    }

    /// Every truncation of a valid assignment, and crafted bad counts and lengths, fail
    /// with a message instead of panicking or allocating what a count claims.
    #[test]
    fn malformed_assignments_are_errors() {
        let good = assignment(0, &[("pay", &[0, 1]), ("q", &[5])], Some(Some(b"ud")));
        assert!(decode_assignment(&good).is_ok());
        // Cutting inside the user data or anything before it; a cut exactly after the
        // partitions is the absent user data that some writers leave out.
        let user_at = good.len() - 6;
        for cut in 1..good.len() {
            let r = decode_assignment(&good[..cut]);
            if cut == user_at {
                assert!(r.is_ok(), "{cut}: {r:?}");
            } else {
                assert!(r.is_err(), "a cut at {cut} decoded: {r:?}");
            }
        }
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (vec![0xff, 0xff, 0, 0, 0, 0], "version -1"),
            (vec![0, 0, 0x7f, 0xff, 0xff, 0xff], "more than the 0 bytes left"),
            (vec![0, 0, 0xff, 0xff, 0xff, 0xfe], "is -2, not a count"),
            // One topic named by 3 bytes that are not UTF-8, then 0 partitions.
            (vec![0, 0, 0, 0, 0, 1, 0, 3, 0xff, 0xfe, 0xfd, 0, 0, 0, 0], "not UTF-8"),
            // A topic name of length -1.
            (vec![0, 0, 0, 0, 0, 1, 0xff, 0xff, 0, 0, 0, 0], "length at byte 6 is -1"),
            // A partition count past the end.
            (vec![0, 0, 0, 0, 0, 1, 0, 1, b't', 0, 0, 1, 0], "more than the 0 bytes left"),
            // User data longer than what is left, and a negative length.
            (vec![0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 1], "needs 5 bytes, only 1 left"),
            (vec![0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xfe], "length at byte 6 is -2"),
            // Bytes after a version 0 assignment.
            (vec![0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 7], "1 bytes after the end"),
        ];
        for (b, want) in cases {
            let e = decode_assignment(&b).unwrap_err();
            assert!(e.contains(want), "{b:?}: {e}");
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        /// Assignments that are any bytes, or valid ones with a byte changed, cut or a count
        /// set huge, decode to an assignment or an error, never a panic.
        #[test]
        fn hostile_assignments_are_an_error_not_a_panic(
            garbage in prop::collection::vec(any::<u8>(), 0..64),
            at in any::<usize>(),
            byte in any::<u8>(),
            huge in any::<i32>(),
            cut in any::<usize>(),
        ) {
            let _ = decode_assignment(&garbage);
            let good = assignment(1, &[("pay", &[0, 1]), ("q", &[5])], Some(Some(b"ud")));
            let _ = decode_assignment(&good[..cut % (good.len() + 1)]);
            let bad = crate::hostile::flipped(&good, at, byte);
            let _ = decode_assignment(&bad);
            let mut big = good.clone();
            let i = at % (big.len() - 3);
            big[i..i + 4].copy_from_slice(&huge.to_be_bytes());
            let _ = decode_assignment(&big);
        }
    }

    #[test]
    fn instance_ids_come_from_static_member_ids() {
        let uuid = "3f2a9c1e-0b4d-4e8f-9a6b-1c2d3e4f5a6b";
        assert_eq!(instance_id(&format!("w1-{uuid}"), "rdkafka").as_deref(), Some("w1"));
        assert_eq!(
            instance_id(&format!("my-worker-{uuid}"), "rdkafka").as_deref(),
            Some("my-worker")
        );
        assert_eq!(instance_id(&format!("rdkafka-{uuid}"), "rdkafka"), None);
        assert_eq!(instance_id(&format!("-{uuid}"), "rdkafka"), None);
        assert_eq!(instance_id("w1-not-a-uuid", "rdkafka"), None);
        assert_eq!(instance_id("", "rdkafka"), None);
        assert_eq!(instance_id(&format!("w1-{}", uuid.replace('-', "x")), "c"), None);
    }

    #[test]
    fn the_table_names_group_members_and_partitions() {
        let uuid = "3f2a9c1e-0b4d-4e8f-9a6b-1c2d3e4f5a6b";
        let m = |id: &str, ps: &[i32]| Member {
            member_id: format!("{id}-{uuid}"),
            client_id: "rdkafka".into(),
            host: "/127.0.0.1".into(),
            group_instance_id: Some(id.into()),
            assignment: vec![tp("pay", ps)],
            assignment_error: None,
        };
        let p = |n: i32, owner: &str, committed: Option<i64>, lag: Option<i64>| PartitionStatus {
            topic: "pay".into(),
            partition: n,
            owner: Some(format!("{owner}-{uuid}")),
            committed,
            end: 1001,
            high_watermark: 1001,
            lag,
        };
        let s = GroupStatus {
            group: "fraud".into(),
            exists: true,
            state: "Stable".into(),
            protocol_type: "consumer".into(),
            protocol: "range".into(),
            end_is: END_IS.into(),
            members: vec![m("w1", &[0]), m("w2", &[1])],
            partitions: vec![p(0, "w1", Some(1000), Some(0)), p(1, "w2", None, None)],
        };
        let t = render_table(&s);
        assert!(t.starts_with("group fraud: Stable, 2 members, protocol consumer/range\n"), "{t}");
        assert!(t.contains(&format!("w1-{uuid}  w1        rdkafka  /127.0.0.1  pay[0]\n")), "{t}");
        assert!(t.contains("TOPIC  PARTITION  OWNER  COMMITTED   END  LAG\n"), "{t}");
        assert!(t.contains("pay            0  w1          1000  1001    0\n"), "{t}");
        assert!(t.contains("pay            1  w2             -  1001    -\n"), "{t}");
        let none = GroupStatus { exists: false, members: vec![], partitions: vec![], ..s };
        assert!(render_table(&none).contains("group fraud: no such group"));
    }
}
