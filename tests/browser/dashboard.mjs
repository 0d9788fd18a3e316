// Drives the dashboard in headless Chromium: the page loads and lists the
// models, a JSON request and an image upload are answered, the live figures
// update, and the per-model plots draw traffic, latency, batch size and errors
// (read back from the canvases' pixels); a screenshot is written to the path given.
// Usage: node dashboard.mjs <base url> <screenshot.png> <image file>
import { chromium } from "playwright-core";

const [baseUrl, screenshot, image] = process.argv.slice(2);
const executablePath = process.env.CHROMIUM || "/usr/bin/chromium";

function check(condition, message) {
  if (!condition) throw new Error(message);
}

const browser = await chromium.launch({
  executablePath,
  args: [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
  ],
});
try {
  const page = await browser.newPage({ viewport: { width: 1300, height: 1100 } });
  const failures = [];
  page.on("pageerror", (err) => failures.push(err.message));
  page.on("requestfailed", (req) => failures.push(`${req.url()} failed`));
  await page.goto(`${baseUrl}/dashboard`);

  await page.waitForSelector('#models tr[data-model="mnist_cnn"]');
  const models = await page.$$eval("#models tr[data-model]", (rows) => [...new Set(rows.map((r) => r.dataset.model))]);
  for (const name of ["half_plus_three", "image_classifier", "mnist_cnn", "adder"]) {
    check(models.includes(name), `model ${name} not listed: ${models}`);
  }
  const adderRows = await page.$$eval('#models tr[data-model="adder"] td:nth-child(2)', (cells) => cells.map((c) => c.textContent));
  // Only the highest version serves under --models_dir's default policy, as in TF Serving.
  check(adderRows.join(",") === "2", `adder versions listed as ${adderRows}`);
  const signature = await page.textContent('#models tr[data-model="mnist_cnn"] .sig');
  check(signature.includes("image float[-1,28,28,1]"), `mnist_cnn signature shown as: ${signature}`);

  // JSON request built from the signature example.
  await page.selectOption("#model-select", "half_plus_three");
  await page.waitForFunction(() => document.getElementById("json-body").value.includes("half_plus_three"));
  await page.fill("#json-body", '{"model_name": "half_plus_three", "data": {"x": [1.0, 2.0]}}');
  await page.click("#json-send");
  await page.waitForFunction(() => document.getElementById("result").textContent.startsWith("HTTP 200"));
  const json = JSON.parse((await page.textContent("#result")).split("\n").slice(1).join("\n"));
  check(JSON.stringify(json.y) === "[3.5,4]", `half_plus_three answered ${JSON.stringify(json)}`);

  // Image upload to the string-input classifier.
  await page.selectOption("#model-select", "image_classifier");
  await page.setInputFiles("#image-file", image);
  await page.click("#image-send");
  await page.waitForFunction(() => /^HTTP \d/.test(document.getElementById("result").textContent));
  const result = await page.textContent("#result");
  check(result.startsWith("HTTP 200"), `image upload answered: ${result}`);
  const answer = JSON.parse(result.split("\n").slice(1).join("\n"));
  check(Array.isArray(answer.classes) && answer.classes.length === 1, `no classes in ${result}`);

  // The live figures: after the requests above, a refresh shows a rate.
  await page.waitForFunction(() => Number(document.getElementById("stat-total").textContent) >= 2, null, { timeout: 10000 });
  await page.waitForFunction(() => document.getElementById("stat-rps").textContent !== "–", null, { timeout: 10000 });

  // The plots: steady traffic to half_plus_three, half of it failing, then
  // what each canvas draws in that model's colour.
  await page.evaluate(async () => {
    const end = Date.now() + 5000;
    // Unknown names at half the rate of bad bodies, so the two error lines part.
    for (let round = 0; Date.now() < end; round++) {
      await fetch("/v1/models/half_plus_three:predict", { method: "POST", body: '{"instances": [1.0, 2.0]}' });
      await fetch("/v1/models/half_plus_three:predict", { method: "POST", body: '{"instances": ["x"]}' });
      if (round % 2 === 0) {
        await fetch("/v1/models/no_such_model:predict", { method: "POST", body: '{"instances": [1.0]}' });
      }
      await new Promise((done) => setTimeout(done, 10));
    }
  });
  await page.waitForFunction(
    // eslint-disable-next-line no-undef
    () => (history.get("half_plus_three") || []).filter((p) => p.rps > 0).length >= 2, null, { timeout: 15000 });
  const colorOf = (model) => page.getAttribute(`#legend [data-model="${model}"]`, "data-color");
  const painted = (id, hex) => page.evaluate(([id, hex]) => {
    const canvas = document.getElementById(id);
    const { data } = canvas.getContext("2d").getImageData(0, 0, canvas.width, canvas.height);
    const want = [1, 3, 5].map((i) => parseInt(hex.slice(i, i + 2), 16));
    let count = 0;
    for (let i = 0; i < data.length; i += 4) {
      if (want.every((c, k) => Math.abs(data[i + k] - c) < 24)) count++;
    }
    return count;
  }, [id, hex]);
  const half = await colorOf("half_plus_three");
  const plots = {};
  for (const id of ["plot-rps", "plot-latency", "plot-batch"]) {
    plots[id] = await painted(id, half);
    check(plots[id] > 20, `${id} draws ${plots[id]} pixels of half_plus_three's ${half}`);
  }
  // Requests whose body failed to decode never resolved a version, but they
  // named a served model: their errors plot under it.
  plots["plot-errors"] = await painted("plot-errors", half);
  check(plots["plot-errors"] > 20, `the errors plot draws ${plots["plot-errors"]} pixels of half_plus_three's ${half}`);
  // A name no model has stays out of the labels: those errors plot as "(no model)".
  const unresolved = await colorOf("(no model)");
  check(unresolved && unresolved !== half, `no series for requests to an unknown model: ${unresolved}`);
  const unknown = await painted("plot-errors", unresolved);
  check(unknown > 20, `the errors plot draws ${unknown} pixels of ${unresolved}`);
  check(failures.length === 0, `page errors: ${failures.join("; ")}`);

  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(JSON.stringify({ models, classes: answer.classes, plots, screenshot }));
} finally {
  await browser.close();
}
