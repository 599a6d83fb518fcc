// troupe::metrics umbrella: ProgressBar, SummaryWriter (JSON lines, CSV, TensorBoard events), the
// record formats and the training-curve plots.
#pragma once

#include <troupe/metrics/plot.h>
#include <troupe/metrics/progress.h>
#include <troupe/metrics/record.h>
#include <troupe/metrics/summary_writer.h>
#include <troupe/metrics/tfrecord.h>
