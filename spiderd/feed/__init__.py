"""Items and feeds: the in-process items writer, WARC files of the fetched answers, feed files shipped over FTP
or to a directory, and the feed's Spark schema."""
