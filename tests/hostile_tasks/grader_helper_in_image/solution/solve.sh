#!/bin/bash
echo 42 > /app/out.txt
