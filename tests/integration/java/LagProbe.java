// Independent cross-check for tests/integration/test_lag_exporter.py: the Java Kafka Admin
// client (not librdkafka) reads one group's committed offsets and the log start/end offsets.
// Run as a single-file program: java -cp '<kafka lib>/*' LagProbe.java <bootstrap> <group>
// Prints one line per partition: topic partition committed log_start log_end lag
// On a cluster the suite did not start, $FLEET_TEST_KAFKA_LOGIN names its client.properties login.
import java.util.*;
import org.apache.kafka.clients.admin.*;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;

public class LagProbe {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        String login = System.getenv("FLEET_TEST_KAFKA_LOGIN");
        if (login != null && !login.isEmpty()) {
            try (java.io.FileReader in = new java.io.FileReader(login)) {
                props.load(in);
            }
        }
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
        try (Admin admin = Admin.create(props)) {
            Map<TopicPartition, OffsetAndMetadata> committed =
                admin.listConsumerGroupOffsets(args[1]).partitionsToOffsetAndMetadata().get();
            Map<TopicPartition, OffsetSpec> latest = new HashMap<>();
            Map<TopicPartition, OffsetSpec> earliest = new HashMap<>();
            for (TopicPartition tp : committed.keySet()) {
                latest.put(tp, OffsetSpec.latest());
                earliest.put(tp, OffsetSpec.earliest());
            }
            var ends = admin.listOffsets(latest).all().get();
            var starts = admin.listOffsets(earliest).all().get();
            List<TopicPartition> tps = new ArrayList<>(committed.keySet());
            tps.sort(Comparator.comparing(TopicPartition::topic).thenComparing(TopicPartition::partition));
            for (TopicPartition tp : tps) {
                long c = committed.get(tp).offset();
                long end = ends.get(tp).offset();
                System.out.println(tp.topic() + " " + tp.partition() + " " + c + " "
                    + starts.get(tp).offset() + " " + end + " " + Math.max(0, end - c));
            }
        }
    }
}
