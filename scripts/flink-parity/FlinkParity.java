// Runs SQL queries on Flink 1.20 (local environment, parallelism 1) over CSV tables and
// writes each query's result to a CSV file: the reference side of scripts/flink-parity.sh.
//
// Usage: java FlinkParity OUTDIR TABLE=DATA.csv ... -- NAME=QUERY.sql ...
// Each DATA.csv is headerless `id,ts_ms,card,merchant,amount`; the table has the rowtime
// `ts AS TO_TIMESTAMP_LTZ(ts_ms, 3)` with `WATERMARK FOR ts AS ts - INTERVAL '0.001' SECOND`,
// advanced after every element (auto-watermark interval 0).
// OUTDIR/NAME.csv gets the query's column names, then one line per row: TIMESTAMP and
// TIMESTAMP_LTZ values as epoch milliseconds (session time zone UTC), NULL as empty.
// A query named `batch:NAME` runs in batch mode instead (same tables, no watermarks or
// triggers; its result goes to OUTDIR/NAME.csv): for window offsets, which Flink 1.20's
// streaming window operator loses data with (FLINK-36664: the next trigger watermark is
// computed without the offset), while batch mode assigns windows with the same slice
// assigners and aggregates every row.

import java.io.PrintWriter;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.Instant;
import java.time.LocalDateTime;
import java.time.ZoneOffset;
import java.util.List;

import org.apache.flink.streaming.api.environment.StreamExecutionEnvironment;
import org.apache.flink.table.api.EnvironmentSettings;
import org.apache.flink.table.api.TableEnvironment;
import org.apache.flink.table.api.TableResult;
import org.apache.flink.table.api.bridge.java.StreamTableEnvironment;
import org.apache.flink.types.Row;
import org.apache.flink.util.CloseableIterator;

public class FlinkParity {
    public static void main(String[] args) throws Exception {
        Path out = Path.of(args[0]);
        StreamExecutionEnvironment env = StreamExecutionEnvironment.createLocalEnvironment(1);
        // A watermark after every element that advances it (WatermarkAssignerOperator emits
        // eagerly when it moved by more than the interval), as Spillway advances its own;
        // with the default 200 ms the watermark lags by up to 200 ms of event time and a
        // session touching one that would have fired merges with it instead.
        env.getConfig().setAutoWatermarkInterval(0);
        StreamTableEnvironment t =
                StreamTableEnvironment.create(env, EnvironmentSettings.inStreamingMode());
        t.getConfig().setLocalTimeZone(ZoneOffset.UTC);
        TableEnvironment batch = TableEnvironment.create(EnvironmentSettings.inBatchMode());
        batch.getConfig().setLocalTimeZone(ZoneOffset.UTC);
        int i = 1;
        for (; i < args.length && !args[i].equals("--"); i++) {
            String[] kv = args[i].split("=", 2);
            String ddl = "CREATE TABLE " + kv[0] + " (id BIGINT, ts_ms BIGINT, card STRING, "
                    + "merchant STRING, amount DOUBLE, ts AS TO_TIMESTAMP_LTZ(ts_ms, 3), "
                    + "WATERMARK FOR ts AS ts - INTERVAL '0.001' SECOND) WITH ("
                    + "'connector' = 'filesystem', 'path' = '" + kv[1] + "', "
                    + "'format' = 'csv')";
            t.executeSql(ddl);
            batch.executeSql(ddl);
        }
        for (i++; i < args.length; i++) {
            String[] kv = args[i].split("=", 2);
            boolean inBatch = kv[0].startsWith("batch:");
            if (inBatch) kv[0] = kv[0].substring("batch:".length());
            String sql = Files.readString(Path.of(kv[1]));
            long t0 = System.nanoTime();
            TableResult r = inBatch ? batch.executeSql(sql) : t.executeSql(sql);
            List<String> names = r.getResolvedSchema().getColumnNames();
            long rows = 0;
            try (PrintWriter w = new PrintWriter(Files.newBufferedWriter(out.resolve(kv[0] + ".csv")));
                    CloseableIterator<Row> it = r.collect()) {
                w.println(String.join(",", names));
                while (it.hasNext()) {
                    Row row = it.next();
                    StringBuilder b = new StringBuilder();
                    for (int f = 0; f < row.getArity(); f++) {
                        if (f > 0) b.append(',');
                        b.append(text(row.getField(f)));
                    }
                    w.println(b);
                    rows++;
                }
            }
            System.err.printf("flink: %s%s: %d rows in %.1f s%n", kv[0], inBatch ? " (batch)" : "", rows, (System.nanoTime() - t0) / 1e9);
        }
    }

    static String text(Object v) {
        if (v == null) return "";
        if (v instanceof LocalDateTime) return Long.toString(((LocalDateTime) v).toInstant(ZoneOffset.UTC).toEpochMilli());
        if (v instanceof Instant) return Long.toString(((Instant) v).toEpochMilli());
        return v.toString();
    }
}
