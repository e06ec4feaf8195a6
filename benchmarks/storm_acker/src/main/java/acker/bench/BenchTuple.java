package acker.bench;

import java.util.List;
import org.apache.storm.generated.GlobalStreamId;
import org.apache.storm.task.GeneralTopologyContext;
import org.apache.storm.tuple.Fields;
import org.apache.storm.tuple.MessageId;
import org.apache.storm.tuple.Tuple;

/**
 * The least a tuple needs for {@link org.apache.storm.daemon.Acker#execute}: source component, stream and task, and
 * positional values held in a {@code List<Object>} as Storm's own {@code TupleImpl} holds them. Everything the acker
 * does not call throws.
 */
final class BenchTuple implements Tuple {
    private final String component;
    private final String stream;
    private final int task;
    private final List<Object> values;

    BenchTuple(String component, String stream, int task, List<Object> values) {
        this.component = component;
        this.stream = stream;
        this.task = task;
        this.values = values;
    }

    @Override
    public String getSourceComponent() {
        return component;
    }

    @Override
    public String getSourceStreamId() {
        return stream;
    }

    @Override
    public int getSourceTask() {
        return task;
    }

    @Override
    public int size() {
        return values.size();
    }

    @Override
    public Object getValue(int i) {
        return values.get(i);
    }

    @Override
    public Long getLong(int i) {
        return (Long) values.get(i);
    }

    @Override
    public Integer getInteger(int i) {
        return (Integer) values.get(i);
    }

    @Override
    public List<Object> getValues() {
        return values;
    }

    private static UnsupportedOperationException unsupported() {
        return new UnsupportedOperationException("not used by the acker");
    }

    @Override
    public GlobalStreamId getSourceGlobalStreamId() {
        throw unsupported();
    }

    @Override
    public MessageId getMessageId() {
        throw unsupported();
    }

    @Override
    public GeneralTopologyContext getContext() {
        throw unsupported();
    }

    @Override
    public boolean contains(String field) {
        throw unsupported();
    }

    @Override
    public Fields getFields() {
        throw unsupported();
    }

    @Override
    public int fieldIndex(String field) {
        throw unsupported();
    }

    @Override
    public List<Object> select(Fields selector) {
        throw unsupported();
    }

    @Override
    public String getString(int i) {
        throw unsupported();
    }

    @Override
    public Boolean getBoolean(int i) {
        throw unsupported();
    }

    @Override
    public Short getShort(int i) {
        throw unsupported();
    }

    @Override
    public Byte getByte(int i) {
        throw unsupported();
    }

    @Override
    public Double getDouble(int i) {
        throw unsupported();
    }

    @Override
    public Float getFloat(int i) {
        throw unsupported();
    }

    @Override
    public byte[] getBinary(int i) {
        throw unsupported();
    }

    @Override
    public Object getValueByField(String field) {
        throw unsupported();
    }

    @Override
    public String getStringByField(String field) {
        throw unsupported();
    }

    @Override
    public Integer getIntegerByField(String field) {
        throw unsupported();
    }

    @Override
    public Long getLongByField(String field) {
        throw unsupported();
    }

    @Override
    public Boolean getBooleanByField(String field) {
        throw unsupported();
    }

    @Override
    public Short getShortByField(String field) {
        throw unsupported();
    }

    @Override
    public Byte getByteByField(String field) {
        throw unsupported();
    }

    @Override
    public Double getDoubleByField(String field) {
        throw unsupported();
    }

    @Override
    public Float getFloatByField(String field) {
        throw unsupported();
    }

    @Override
    public byte[] getBinaryByField(String field) {
        throw unsupported();
    }

    @Override
    public String toString() {
        return component + ":" + task + "/" + stream + values;
    }
}
