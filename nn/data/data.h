// troupe::data umbrella (torch.utils.data): Example, Dataset, TensorDataset, Subset, random_split,
// DataLoader, and the digits dataset shipped in datasets/digits.
#pragma once

#include <troupe/nn/data/dataloader.h>
#include <troupe/nn/data/dataset.h>
#include <troupe/nn/data/digits.h>
