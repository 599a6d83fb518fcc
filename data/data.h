// troupe::data umbrella (torch.utils.data): Example, Dataset, TensorDataset, Subset, random_split,
// DataLoader, and the digits dataset shipped in datasets/digits.
#pragma once

#include <troupe/data/dataloader.h>
#include <troupe/data/dataset.h>
#include <troupe/data/digits.h>
