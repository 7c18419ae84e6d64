package dev.eo.writer;

import static org.junit.jupiter.api.Assertions.assertEquals;

import org.junit.jupiter.api.Test;

class JsonTest {
  @Test
  void floatsAreWrittenAsPythonsReprWritesThem() {
    // Each pair checked against CPython 3.11's repr().
    Object[][] cases = {
      {0.0, "0.0"},
      {-0.0, "-0.0"},
      {1.5, "1.5"},
      {100.0, "100.0"},
      {0.1, "0.1"},
      {0.0001, "0.0001"},
      {0.00001, "1e-05"},
      {1.5e-5, "1.5e-05"},
      {1e15, "1000000000000000.0"},
      {1e16, "1e+16"},
      {123456789012345680.0, "1.2345678901234568e+17"},
      {(double) 0.1f, "0.10000000149011612"},
      {Double.MAX_VALUE, "1.7976931348623157e+308"},
      {Double.MIN_VALUE, "5e-324"},
      {-2.5e-300, "-2.5e-300"},
      {2.82879384806159e17, "2.82879384806159e+17"},
    };
    for (Object[] c : cases) {
      assertEquals(c[1], Json.pythonRepr((double) c[0]), String.valueOf(c[0]));
    }
  }

  @Test
  void aNanOrInfinityIsItsPythonText() {
    StringBuilder out = new StringBuilder();
    Json.number(out, Double.NaN);
    out.append(',');
    Json.number(out, Double.NEGATIVE_INFINITY);
    assertEquals("\"nan\",\"-inf\"", out.toString());
  }

  @Test
  void timestampsAreIsoformatWithMicrosecondsOnlyWhenSome() {
    assertEquals("1970-01-01T00:00:00", Json.timestamp(0));
    assertEquals("1970-01-01T00:00:00.000001", Json.timestamp(1));
    assertEquals("1969-12-31T23:59:59.999000", Json.timestamp(-1000));
    assertEquals("0002-01-01", Json.date(-718_797));
  }
}
