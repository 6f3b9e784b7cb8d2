"""Items and feeds: the in-process items writer, WARC files of the fetched answers, feed files shipped over FTP,
FTPS or SFTP or to a directory (as JSON lines, WARC or Parquet), their partitions' completion markers, and the
feed's Spark schema."""
