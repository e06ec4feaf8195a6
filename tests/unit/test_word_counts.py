"""The count bolt's counts (`acker.examples.wordcount.WordCount`): a words partition that moves to another process
goes on from the last count written for its words, never from 1 (counts may be too high, never too low)."""

from __future__ import annotations

import contextlib
from collections import Counter

from acker.bolt import BoltInput, Collector
from acker.core.ids import IdGenerator
from acker.core.tuple_tree import UNTRACKED, InputTuple
from acker.examples.wordcount import Topics, count_function
from acker.headers import Headers

WORDS = "t.words"


class CountsTopic(Collector):
    """The counts topic, written through the collectors of every count process; the last count of each word is what
    a process that takes a partition reads (`published`)."""

    def __init__(self) -> None:  # no bolt: writes go to the list
        self.records: list[tuple[bytes, int]] = []
        self.delivered = True  # False: written, not delivered yet (not in the topic)

    def write(
        self,
        topic: str,
        value: bytes | None,
        key: bytes | None = None,
        headers: Headers | None = None,
        anchors: object = (),
    ) -> None:
        assert topic == "t.counts" and key is not None and value is not None
        if self.delivered:
            self.records.append((key, int(value)))

    def ack(self, message: BoltInput) -> None:
        pass

    def published(self) -> dict[bytes, int]:
        """The last count written of each word."""
        return dict(self.records)


def _word(word: bytes, partition: int, offset: int) -> BoltInput:
    return BoltInput(word, word, [], WORDS, partition, offset, InputTuple(UNTRACKED, IdGenerator(1)))


def test_a_partition_handed_over_goes_on_from_the_last_count_written() -> None:
    """The second count process took over a partition (the rebalance when it joined, a restart) and counted its
    words from 1: the last count of a word in the counts topic ended below the times it was seen."""
    topic = CountsTopic()
    first = count_function(Topics("t"), Counter(), published=topic.published)
    second = count_function(Topics("t"), Counter(), published=topic.published)
    for offset in range(3):
        first(_word(b"the", 0, offset), topic)
    first(_word(b"cow", 1, 0), topic)
    first.revoked({(WORDS, 0)}, topic)  # partition 0 goes to the second process; 1 stays
    assert b"the" not in first.counts and first.counts[b"cow"] == 1  # the revoked partition's words are forgotten
    second(_word(b"the", 0, 3), topic)
    second(_word(b"the", 0, 4), topic)
    first(_word(b"cow", 1, 1), topic)
    assert topic.published() == {b"the": 5, b"cow": 2}


def test_a_partition_lost_and_given_back_goes_on_from_what_the_other_process_counted() -> None:
    """A partition lost (this process was taken for dead) is not told: its next input, past offsets the other
    process counted, does not follow the last counted here, and the counts are read again."""
    topic = CountsTopic()
    first = count_function(Topics("t"), Counter(), published=topic.published)
    second = count_function(Topics("t"), Counter(), published=topic.published)
    first(_word(b"moon", 0, 0), topic)
    first(_word(b"moon", 0, 1), topic)
    for offset in range(1, 4):  # from the last committed offset: offset 1 counted twice (at-least-once)
        second(_word(b"moon", 0, offset), topic)
    first(_word(b"moon", 0, 4), topic)  # given back
    assert [count for _, count in topic.records] == [1, 2, 3, 4, 5, 6]
    assert first.rebuilds == 2 and second.rebuilds == 1  # each partition's first input, and the one past a gap


def test_a_count_not_delivered_yet_is_not_taken_back_by_an_older_published_one() -> None:
    """The last count written is the highest, unless this process counted since: then its own is ahead."""
    topic = CountsTopic()
    counts = count_function(Topics("t"), Counter(), published=topic.published)
    counts(_word(b"day", 0, 0), topic)
    topic.delivered = False  # these two are on their way
    counts(_word(b"day", 0, 1), topic)
    counts(_word(b"day", 0, 2), topic)
    topic.delivered = True
    counts(_word(b"day", 1, 0), topic)  # a partition's first input: the counts are read again
    assert topic.published() == {b"day": 4}


def test_a_word_counted_from_a_partition_still_here_is_kept_when_another_is_revoked() -> None:
    """After partitions were added to the words topic, a word's inputs may come from two partitions."""
    topic = CountsTopic()
    counts = count_function(Topics("t"), Counter(), published=topic.published)
    counts(_word(b"a", 0, 0), topic)
    counts(_word(b"a", 1, 0), topic)
    counts.revoked({(WORDS, 0)}, topic)
    assert counts.counts == Counter({b"a": 2})


def test_a_partition_lost_and_given_back_where_it_was_read_to_reads_the_counts_published_meanwhile() -> None:
    """Lost (taken for dead), the partition's new owner counted inputs below this process's next offset that were
    not committed, then it came back at that very offset: without being told of the loss, this process went on
    from its own counts, below those published meanwhile, and a word's last count went down."""
    topic = CountsTopic()
    first = count_function(Topics("t"), Counter(), published=topic.published)
    second = count_function(Topics("t"), Counter(), published=topic.published)
    for offset in range(3):
        first(_word(b"the", 0, offset), topic)
    first.lost({(WORDS, 0)})  # its session timed out; offsets 1 and 2 were not committed
    for offset in (1, 2):
        second(_word(b"the", 0, offset), topic)  # counted again: 5 now, too high (at-least-once), never too low
    second.revoked({(WORDS, 0)}, topic)
    first(_word(b"the", 0, 3), topic)  # given back at the offset it would have read next
    assert topic.records[-1] == (b"the", 6)


def test_partitions_that_came_together_read_the_published_counts_once() -> None:
    """A process taking over many partitions read the whole counts topic at each one's first input; one read made
    after they all came serves them all. One that comes after that read, or is lost and given back, reads again."""
    topic = CountsTopic()
    reads = Counter[str]()

    def published() -> dict[bytes, int]:
        reads["reads"] += 1
        return topic.published()

    counts = count_function(Topics("t"), Counter(), published=published)
    counts.assigned({(WORDS, p) for p in range(8)})
    for partition in range(8):
        counts(_word(b"over", partition, 5), topic)
    assert counts.rebuilds == 1 and reads["reads"] == 1
    counts.assigned({(WORDS, 8)})
    counts(_word(b"over", 8, 0), topic)
    counts(_word(b"over", 0, 6), topic)
    assert counts.rebuilds == 2
    counts.lost({(WORDS, 3)})
    counts.assigned({(WORDS, 3)})
    topic.records.append((b"over", 40))  # counted by the process that had partition 3 meanwhile
    counts(_word(b"over", 3, 6), topic)  # given back at the offset it would have read next
    assert counts.rebuilds == 3 and topic.records[-1] == (b"over", 41)


def test_a_partition_that_came_after_the_read_reads_the_counts_published_since() -> None:
    """Told of a partition between two inputs of others: the read before it came does not serve it."""
    topic = CountsTopic()
    counts = count_function(Topics("t"), Counter(), published=topic.published)
    counts.assigned({(WORDS, 0)})
    counts(_word(b"moon", 0, 0), topic)
    topic.records.append((b"moon", 9))  # partition 1's previous owner wrote its last count
    counts.assigned({(WORDS, 1)})
    counts(_word(b"moon", 1, 3), topic)
    assert topic.records[-1] == (b"moon", 10)


def test_a_read_of_the_published_counts_that_failed_is_made_again_at_the_next_input() -> None:
    """The partitions were taken as read before the read was made: when it raised (Kafka not answering), the
    input failed, and the next one counted from 1, below the count the previous owner had written."""
    topic = CountsTopic()
    topic.records.append((b"moon", 40))
    failing = [True]

    def published() -> dict[bytes, int]:
        if failing.pop(0) if failing else False:
            raise TimeoutError("the counts topic could not be read")
        return topic.published()

    counts = count_function(Topics("t"), Counter(), published=published)
    counts.assigned({(WORDS, 0), (WORDS, 1)})
    with contextlib.suppress(TimeoutError):  # the bolt fails the input; it is replayed
        counts(_word(b"moon", 0, 5), topic)
    counts(_word(b"moon", 1, 3), topic)
    assert topic.records[-1] == (b"moon", 41)
