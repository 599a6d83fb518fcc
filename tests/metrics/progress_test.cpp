// ProgressBar: tqdm's format_meter and format_interval texts, the bar filling exactly its width, and
// what reaches the stream on a terminal (redraws in place) and off one (a line per interval, one at the
// end), with write() above the bar and disable() printing nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <thread>

#include <troupe/metrics/progress.h>

using namespace troupe::metrics;

namespace {

// Everything written to a tmpfile.
std::string contents(std::FILE* f) {
  std::fflush(f);
  std::rewind(f);
  std::string s;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) s.append(buf, n);
  return s;
}

int width(const std::string& s) {
  int w = 0;
  for (unsigned char c : s)
    if ((c & 0xC0) != 0x80) ++w;
  return w;
}

int count(const std::string& s, const std::string& what) {
  int n = 0;
  for (size_t at = s.find(what); at != std::string::npos; at = s.find(what, at + what.size())) ++n;
  return n;
}

}  // namespace

TEST(ProgressBar, FormatInterval) {
  EXPECT_EQ(ProgressBar::format_interval(0), "00:00");
  EXPECT_EQ(ProgressBar::format_interval(59.9), "00:59");
  EXPECT_EQ(ProgressBar::format_interval(61), "01:01");
  EXPECT_EQ(ProgressBar::format_interval(3600 + 120 + 5), "1:02:05");
  EXPECT_EQ(ProgressBar::format_interval(NAN), "?");
}

TEST(ProgressBar, LogLineText) {
  // 7 of 20 in 2 s: 3.5/s, 13 left -> 3.71 s
  EXPECT_EQ(ProgressBar::format_meter(7, 20, 2.0, 0, "train", "epoch", "loss 0.1234"),
            "train: 35% 7/20 [00:02<00:03, 3.50epoch/s, loss 0.1234]");
  EXPECT_EQ(ProgressBar::format_meter(1, 4, 4.0, 0, "", "it", ""), "25% 1/4 [00:04<00:12, 4.00s/it]");
  EXPECT_EQ(ProgressBar::format_meter(0, 4, 0.0, 0, "", "it", ""), "0% 0/4 [00:00<?, ?it/s]");
  EXPECT_EQ(ProgressBar::format_meter(1500, 0, 3.0, 0, "collect", "frames", ""),
            "collect: 1500frames [00:03, 500.00frames/s]");
}

TEST(ProgressBar, TerminalBarFillsItsWidth) {
  for (int n : {0, 1, 7, 10, 13, 20}) {
    const std::string s = ProgressBar::format_meter(n, 20, 2.0, 60, "train", "it", "");
    EXPECT_EQ(width(s), 59) << s;  // one column left free (no wrap at the terminal's edge)
    EXPECT_EQ(s.rfind("train: ", 0), 0u) << s;
  }
  // 35% of a 28-column bar: 9.8 cells -> 9 full blocks and a 6/8 block
  const std::string s = ProgressBar::format_meter(7, 20, 2.0, 67, "t", "it", "");
  EXPECT_EQ(s, "t:  35%|█████████▊                  | 7/20 [00:02<00:03, 3.50it/s]");
  EXPECT_EQ(count(ProgressBar::format_meter(20, 20, 2.0, 60, "", "it", ""), "█"),
            60 - 1 - width("100%||") - width(" 20/20 [00:02<00:00, 10.00it/s]"));
}

TEST(ProgressBar, OffTerminalOneLinePerIntervalAndAtTheEnd) {
  std::FILE* f = std::tmpfile();
  {
    ProgressBar bar(100, ProgressOptions().desc("cases").file(f).tty(false).log_interval(3600));
    EXPECT_FALSE(bar.is_tty());
    for (int i = 0; i < 100; ++i) bar.update();
    bar.set_postfix("done");
  }
  std::string out = contents(f);
  EXPECT_EQ(count(out, "\n"), 1) << out;
  EXPECT_EQ(out.rfind("cases: 100% 100/100 [", 0), 0u) << out;
  EXPECT_NE(out.find(", done]\n"), std::string::npos) << out;
  EXPECT_EQ(out.find('\r'), std::string::npos);
  std::fclose(f);

  f = std::tmpfile();
  {
    ProgressBar bar(3, ProgressOptions().file(f).tty(false).log_interval(0));
    bar.update();
    bar.update();
    bar.update();
    bar.close();  // the last update already printed 3/3: no second final line
  }
  out = contents(f);
  EXPECT_EQ(count(out, "\n"), 3) << out;
  EXPECT_NE(out.find("33% 1/3"), std::string::npos);
  EXPECT_NE(out.find("100% 3/3"), std::string::npos);
  std::fclose(f);
}

TEST(ProgressBar, OnTerminalRedrawsInPlace) {
  std::FILE* f = std::tmpfile();
  {
    ProgressBar bar(4, ProgressOptions().desc("epoch").file(f).tty(true).mininterval(0).ncols(70));
    EXPECT_TRUE(bar.is_tty());
    bar.update();
    bar.update(3);
  }
  const std::string out = contents(f);
  EXPECT_EQ(count(out, "\n"), 1) << out;          // one line, ended by close()
  EXPECT_EQ(count(out, "\r"), 4) << out;          // drawn at start, twice on update, at close
  EXPECT_EQ(count(out, "\033[K"), 4) << out;      // each draw clears what was left of a longer line
  EXPECT_NE(out.find("epoch: 100%|"), std::string::npos) << out;
  std::fclose(f);
}

TEST(ProgressBar, MininterValLimitsRedraws) {
  std::FILE* f = std::tmpfile();
  {
    ProgressBar bar(1000, ProgressOptions().file(f).tty(true).mininterval(3600).ncols(60));
    for (int i = 0; i < 999; ++i) bar.update();  // none draws: the interval has not passed
    bar.update();                                 // reaching the total always draws
  }
  EXPECT_EQ(count(contents(f), "\r"), 3);  // start, the total, close
  std::fclose(f);
}

TEST(ProgressBar, WriteGoesAboveTheBar) {
  std::FILE* bar_f = std::tmpfile();
  std::FILE* out_f = std::tmpfile();
  {
    ProgressBar bar(2, ProgressOptions().file(bar_f).tty(true).mininterval(0).ncols(60));
    bar.update();
    bar.write("epoch 1 done", out_f);
    bar.update();
  }
  EXPECT_EQ(contents(out_f), "epoch 1 done\n");
  const std::string b = contents(bar_f);
  EXPECT_NE(b.find("\r\033[K\r"), std::string::npos) << b;  // cleared, then drawn again
  std::fclose(bar_f);
  std::fclose(out_f);

  out_f = std::tmpfile();
  bar_f = std::tmpfile();
  {
    ProgressBar bar(2, ProgressOptions().file(bar_f).tty(false).log_interval(3600));
    bar.write("plain", out_f);
  }
  EXPECT_EQ(contents(out_f), "plain\n");
  EXPECT_EQ(contents(bar_f).find("\033"), std::string::npos);
  std::fclose(bar_f);
  std::fclose(out_f);
}

TEST(ProgressBar, DisabledPrintsNothing) {
  std::FILE* f = std::tmpfile();
  std::FILE* out_f = std::tmpfile();
  {
    ProgressBar bar(5, ProgressOptions().file(f).tty(true).disable(true));
    bar.update(5);
    bar.write("still printed", out_f);  // write() is output of the program, not of the bar
  }
  EXPECT_EQ(contents(f), "");
  EXPECT_EQ(contents(out_f), "still printed\n");
  std::fclose(f);
  std::fclose(out_f);
}

TEST(ProgressBar, RateAndEtaFromElapsedTime) {
  std::FILE* f = std::tmpfile();
  ProgressBar bar(4, ProgressOptions().file(f).tty(false).log_interval(3600));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  bar.update(2);
  EXPECT_GE(bar.elapsed(), 0.05);
  EXPECT_EQ(bar.n(), 2);
  bar.close();
  bar.update();  // ignored after close
  EXPECT_EQ(bar.n(), 2);
  const std::string out = contents(f);
  // 2 in >= 0.05 s: at most 40/s
  double rate = 0;
  ASSERT_EQ(std::sscanf(out.c_str() + out.find(", ") + 2, "%lfit/s", &rate), 1) << out;
  EXPECT_GT(rate, 0);
  EXPECT_LE(rate, 40.0);
  std::fclose(f);
}
