package dev.eo.writer;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.util.List;
import java.util.Map;
import org.junit.jupiter.api.Test;

class SpecTest {
  private static final String JSON =
      """
      {"url": "jdbc:postgresql://127.0.0.1:5432/eo",
       "properties": {"user": "eo", "ApplicationName": "eo-writer"},
       "copySql": "COPY \\"public\\".\\"t\\" (\\"id\\", \\"v\\") FROM STDIN (FORMAT binary)",
       "stageSql": null, "mergeSql": null, "dropSql": null,
       "sessionSql": "SELECT set_config('lock_timeout', %s, true)",
       "typesSql": "SELECT 1", "markerSql": "INSERT", "table": "public.t",
       "columns": ["id", "v"], "targetTypes": {"id": "int8", "v": "text"},
       "reasonIndex": 2, "rawIndex": 3, "deadLetterSql": null, "clearSql": null,
       "tableName": "public.t", "refusedSql": null, "refusedTable": null,
       "refusedCreateSql": null, "keptMemoryBytes": 67108864,
       "gidPrefix": "eo1:p:q:s:1:7:", "twoPhase": true, "pipeline": "p", "batchId": 7,
       "lockTimeoutMs": 5000, "reopenSeconds": 2.5, "fault": null, "driverPid": 42}
      """;

  @Test
  void theDriversDescriptionParses() throws IOException {
    Spec spec = Spec.parse(JSON);
    assertEquals("jdbc:postgresql://127.0.0.1:5432/eo", spec.url);
    assertEquals(Map.of("user", "eo", "ApplicationName", "eo-writer"), spec.properties);
    assertEquals("COPY \"public\".\"t\" (\"id\", \"v\") FROM STDIN (FORMAT binary)", spec.copySql);
    assertNull(spec.stageSql);
    assertEquals(List.of("id", "v"), spec.columns);
    assertEquals(Map.of("id", "int8", "v", "text"), spec.targetTypes);
    assertEquals(2, spec.reasonIndex);
    assertEquals(3, spec.rawIndex);
    assertEquals(67_108_864L, spec.keptMemoryBytes);
    assertEquals("eo1:p:q:s:1:7:", spec.gidPrefix);
    assertTrue(spec.twoPhase);
    assertEquals(7L, spec.batchId);
    assertEquals(5000, spec.lockTimeoutMs);
    assertEquals(2.5, spec.reopenSeconds);
    assertNull(spec.fault);
    assertEquals(42L, spec.driverPid);
  }

  @Test
  void aDescriptionWithoutDeadLetterColumnsHasNone() throws IOException {
    Spec spec = Spec.parse("{\"columns\": [\"id\"]}");
    assertEquals(-1, spec.reasonIndex);
    assertEquals(-1, spec.rawIndex);
  }

  @Test
  void aFieldTheWriterDoesNotKnowIsRefusedNotIgnored() {
    // A driver newer than its jar must fail loudly, not have its new field dropped.
    assertThrows(
        com.fasterxml.jackson.databind.exc.UnrecognizedPropertyException.class,
        () -> Spec.parse("{\"columns\": [\"id\"], \"upsertKeys\": [\"id\"]}"));
  }

  @Test
  void aMySqlDescriptionParsesWithItsRefusalCodesByNumber() throws IOException {
    Spec spec =
        Spec.parse(
            """
            {"kind": "mysql", "columns": ["id"], "tableName": "db.t", "reopenSeconds": 60,
             "mysql": {"host": "::1", "port": 3306, "user": "eo", "password": "",
               "database": "db", "connectTimeoutSeconds": 10, "sessionSql": "SET %s",
               "sqlMode": "STRICT_TRANS_TABLES", "lockWaitTimeoutSeconds": 30,
               "sessionWaitTimeoutSeconds": 300, "insertPrefix": "INSERT INTO `t` (`id`) VALUES ",
               "insertSuffix": "", "chunkRows": 5000, "statementChars": 1048576,
               "markerSql": "INSERT", "gtrid": "aa", "bqualHead": "bb", "bqualTail": "cc",
               "formatId": 1701785649, "deadLetterTable": null, "deadLetterExistsSql": null,
               "deadLetterDdl": null, "deadLetterInsertPrefix": null, "batchDeadLetters": false,
               "refusedToDeadLetters": true, "refusalCodes": {"1048": "BAD_NULL_ERROR"},
               "keyIndexes": [], "versionIndex": -1}}
            """);
    assertEquals(Spec.MYSQL, spec.kind);
    assertEquals("::1", spec.mysql.host);
    assertEquals(Map.of(1048, "BAD_NULL_ERROR"), spec.mysql.refusalCodes);
    assertEquals(1_701_785_649L, spec.mysql.formatId);
    assertTrue(spec.mysql.refusedToDeadLetters);
    assertEquals(Spec.POSTGRESQL, Spec.parse("{\"columns\": []}").kind);
  }

  @Test
  void theStagePlaceholderIsTheOneTheDriverWrites() {
    assertEquals("@@STAGE@@", Spec.STAGE);
  }
}
