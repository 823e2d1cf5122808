//! The consumer's requests to its group and its broker, as the pipeline asks them: commit,
//! read committed offsets, pause, resume, position, list the assignment, look the topic up.
//! Thin on purpose: nothing here decides. The pipeline's state decides what to ask and what
//! each answer means; this only carries the request and hands the answer back.

use super::SourceContext;
use crate::commit::Partition;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::error::KafkaResult;
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;

/// One topic's view of the consumer.
pub struct Group<'a> {
    consumer: &'a BaseConsumer<SourceContext>,
    topic: &'a str,
}

/// What the group has committed for one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Committed {
    /// Nothing.
    Nothing,
    /// An offset, with its metadata (possibly empty).
    At(i64, String),
    /// The read failed: the whole request, or this partition's entry (also when the answer
    /// left it out).
    Failed(String),
}

impl<'a> Group<'a> {
    /// `consumer`'s view of `topic`.
    pub fn new(consumer: &'a BaseConsumer<SourceContext>, topic: &'a str) -> Self {
        Group { consumer, topic }
    }

    /// The topic.
    pub fn topic(&self) -> &str {
        self.topic
    }

    /// The consumer, for the requests this does not carry (`start_from`'s time lookup).
    pub fn consumer(&self) -> &BaseConsumer<SourceContext> {
        self.consumer
    }

    /// Commits `(partition, offset, metadata)` synchronously, in one request.
    pub fn commit<'m>(
        &self,
        points: impl IntoIterator<Item = (Partition, i64, Option<&'m str>)>,
    ) -> KafkaResult<()> {
        let mut tpl = TopicPartitionList::new();
        for (p, o, metadata) in points {
            tpl.add_partition_offset(self.topic, p, Offset::Offset(o))?;
            if let (Some(m), Some(mut e)) = (metadata, tpl.find_partition(self.topic, p)) {
                e.set_metadata(m);
            }
        }
        self.consumer.commit(&tpl, CommitMode::Sync)
    }

    /// What the group has committed for each of `partitions`, in their order.
    pub fn committed(&self, partitions: &[Partition], timeout: Duration) -> Vec<Committed> {
        if partitions.is_empty() {
            return Vec::new();
        }
        match self
            .consumer
            .committed_offsets(self.list(partitions), timeout)
        {
            Ok(c) => partitions
                .iter()
                .map(|&p| match c.find_partition(self.topic, p) {
                    None => Committed::Failed("the broker's answer left the partition out".into()),
                    Some(e) => match (e.error(), e.offset()) {
                        (Err(err), _) => Committed::Failed(err.to_string()),
                        (Ok(()), Offset::Offset(o)) => Committed::At(o, e.metadata().to_string()),
                        (Ok(()), _) => Committed::Nothing,
                    },
                })
                .collect(),
            Err(e) => partitions
                .iter()
                .map(|_| Committed::Failed(e.to_string()))
                .collect(),
        }
    }

    /// The partitions of the topic assigned to this consumer.
    pub fn assignment(&self) -> KafkaResult<Vec<Partition>> {
        let a = self.consumer.assignment()?;
        Ok(a.elements()
            .iter()
            .filter(|e| e.topic() == self.topic)
            .map(|e| e.partition())
            .collect())
    }

    /// Pauses `partitions` (nothing to do for none).
    pub fn pause(&self, partitions: &[Partition]) -> KafkaResult<()> {
        if partitions.is_empty() {
            return Ok(());
        }
        self.consumer.pause(&self.list(partitions))
    }

    /// Resumes `partitions` (nothing to do for none).
    pub fn resume(&self, partitions: &[Partition]) -> KafkaResult<()> {
        if partitions.is_empty() {
            return Ok(());
        }
        self.consumer.resume(&self.list(partitions))
    }

    /// Positions `partition` at `offset`.
    pub fn seek(&self, partition: Partition, offset: Offset, timeout: Duration) -> KafkaResult<()> {
        self.consumer.seek(self.topic, partition, offset, timeout)
    }

    /// Whether the broker lists the topic with partitions (a listing of all topics: it never
    /// auto-creates one); `None` when the request failed.
    pub fn topic_listed(&self, timeout: Duration) -> Option<bool> {
        let md = self.consumer.fetch_metadata(None, timeout).ok()?;
        Some(
            md.topics()
                .iter()
                .any(|t| t.name() == self.topic && !t.partitions().is_empty()),
        )
    }

    fn list(&self, partitions: &[Partition]) -> TopicPartitionList {
        let mut tpl = TopicPartitionList::new();
        for p in partitions {
            tpl.add_partition(self.topic, *p);
        }
        tpl
    }
}
