package io.flightsink.spark;

import java.util.Map;
import org.apache.spark.SparkUnsupportedOperationException;
import org.apache.spark.sql.connector.catalog.Identifier;

/** The errors the catalog raises in Spark's own error classes. */
final class CatalogErrors {
  private CatalogErrors() {}

  /**
   * Spark's standard refusal of an operation a table does not support ({@code
   * UNSUPPORTED_FEATURE.TABLE_OPERATION}: "Table `fs`.`default`.`t` does not support RENAME
   * TABLE. ..."), naming the table and the operation.
   */
  static SparkUnsupportedOperationException unsupported(String table, String operation) {
    return new SparkUnsupportedOperationException("UNSUPPORTED_FEATURE.TABLE_OPERATION",
        Map.of("tableName", table, "operation", operation));
  }

  /** The quoted name Spark's messages use: {@code `catalog`.`namespace`.`table`}. */
  static String quoted(String catalog, Identifier ident) {
    StringBuilder b = new StringBuilder(quote(catalog));
    for (String n : ident.namespace()) {
      b.append('.').append(quote(n));
    }
    return b.append('.').append(quote(ident.name())).toString();
  }

  private static String quote(String part) {
    return "`" + part.replace("`", "``") + "`";
  }
}
