// troupe::data umbrella. Two fronts over one Example<>:
//  - torch.utils.data's (Python-like): Dataset, TensorDataset, Subset, random_split, DataLoader, and the
//    digits dataset shipped in datasets/digits;
//  - libtorch's torch::data: datasets::Dataset / BatchDataset / TensorDataset / MapDataset, transforms,
//    samplers and make_data_loader.
#pragma once

#include <troupe/data/dataloader.h>
#include <troupe/data/dataloader/stateless.h>
#include <troupe/data/dataset.h>
#include <troupe/data/datasets/base.h>
#include <troupe/data/datasets/map.h>
#include <troupe/data/datasets/mnist.h>
#include <troupe/data/datasets/tensor.h>
#include <troupe/data/digits.h>
#include <troupe/data/example.h>
#include <troupe/data/iterator.h>
#include <troupe/data/samplers/base.h>
#include <troupe/data/samplers/distributed.h>
#include <troupe/data/samplers/random.h>
#include <troupe/data/samplers/sequential.h>
#include <troupe/data/samplers/stream.h>
#include <troupe/data/transforms/base.h>
#include <troupe/data/transforms/lambda.h>
#include <troupe/data/transforms/stack.h>
#include <troupe/data/transforms/tensor.h>
#include <troupe/data/worker_exception.h>
