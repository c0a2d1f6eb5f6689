"""The Spark executor backend: the worker's SparkSession (`session`), Spark job and batch
tasks' attempts (`jobs`), what runs on the executors for a batch (`items`: standard library
and pyspark only) and how a batch task's deliveries are gathered into jobs (`batcher`)."""
