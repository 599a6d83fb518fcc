// troupe::metrics umbrella: ProgressBar, SummaryWriter (JSON lines, CSV, TensorBoard events), the
// record formats, the training-curve plots, and LiveLog (the written scalars kept for the live page).
#pragma once

#include <troupe/metrics/live.h>
#include <troupe/metrics/plot.h>
#include <troupe/metrics/progress.h>
#include <troupe/metrics/record.h>
#include <troupe/metrics/summary_writer.h>
#include <troupe/metrics/tfrecord.h>
