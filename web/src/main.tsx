import { render } from "preact";
import { App } from "./app";
import { takeTokenFromLocation } from "./lib/auth";
import "./style.css";

const offered = takeTokenFromLocation(location, history, localStorage);
render(<App offered={offered} />, document.getElementById("app")!);
