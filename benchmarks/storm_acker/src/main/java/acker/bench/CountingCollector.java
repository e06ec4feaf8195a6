package acker.bench;

import java.util.Collection;
import java.util.List;
import org.apache.storm.daemon.Acker;
import org.apache.storm.task.IOutputCollector;
import org.apache.storm.tuple.Tuple;

/**
 * Stands in for the executor's collector: counts what the acker emits (the decisions sent to spout tasks) and the
 * input tuples it acks, and keeps nothing else, so the timing is the acker's own work.
 */
final class CountingCollector implements IOutputCollector {
    long acked;
    long failed;
    long resets;
    long inputAcks;

    @Override
    public List<Integer> emit(String streamId, Collection<Tuple> anchors, List<Object> tuple) {
        throw new UnsupportedOperationException("the acker only emits direct");
    }

    @Override
    public void emitDirect(int taskId, String streamId, Collection<Tuple> anchors, List<Object> tuple) {
        switch (streamId) {
            case Acker.ACKER_ACK_STREAM_ID -> acked++;
            case Acker.ACKER_FAIL_STREAM_ID -> failed++;
            case Acker.ACKER_RESET_TIMEOUT_STREAM_ID -> resets++;
            default -> throw new IllegalStateException("unexpected stream " + streamId);
        }
    }

    @Override
    public void ack(Tuple input) {
        inputAcks++;
    }

    @Override
    public void fail(Tuple input) {
        throw new UnsupportedOperationException("the acker never fails its input");
    }

    @Override
    public void resetTimeout(Tuple input) {
        throw new UnsupportedOperationException("the acker never resets its input");
    }

    @Override
    public void flush() {
    }

    @Override
    public void reportError(Throwable error) {
        throw new IllegalStateException(error);
    }
}
