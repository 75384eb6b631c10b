#!/bin/sh
# The bucket, then the job queue and its dead-letter queue (README.md, "Running workers"):
# VisibilityTimeout 300 s = the workers' --visibility-timeout-s default; a message
# received 5 times goes to the DLQ, which keeps it 14 days (the queue: 4).
set -e
awslocal s3 mb s3://compactor || true
awslocal sqs create-queue --queue-name compactor-jobs-dlq \
  --attributes '{"MessageRetentionPeriod":"1209600"}'
awslocal sqs create-queue --queue-name compactor-jobs \
  --attributes '{"VisibilityTimeout":"300","MessageRetentionPeriod":"345600","RedrivePolicy":"{\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:compactor-jobs-dlq\",\"maxReceiveCount\":\"5\"}"}'
