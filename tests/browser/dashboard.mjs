// Drives the dashboard in headless Chromium: the page loads and lists the
// models, a JSON request and an image upload are answered, the live figures
// update; a screenshot is written to the path given.
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
  check(failures.length === 0, `page errors: ${failures.join("; ")}`);

  await page.screenshot({ path: screenshot, fullPage: true });
  console.log(JSON.stringify({ models, classes: answer.classes, screenshot }));
} finally {
  await browser.close();
}
