#!/bin/sh
set -e
awslocal s3 mb s3://compactor || true
awslocal sqs create-queue --queue-name compactor-jobs-dlq
awslocal sqs create-queue --queue-name compactor-jobs \
  --attributes '{"VisibilityTimeout":"300","RedrivePolicy":"{\"deadLetterTargetArn\":\"arn:aws:sqs:us-east-1:000000000000:compactor-jobs-dlq\",\"maxReceiveCount\":\"5\"}"}'
